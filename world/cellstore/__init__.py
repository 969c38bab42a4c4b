"""The file cell store: cell states packed into index shards, content-addressed in the CAS.

``_store`` holds ``FileCellStore``; ``_format`` the shard, index and checkpoint formats;
``_flush`` the plan of one flush; ``_disk`` its files and durable operations; ``_legacy`` the
reader of the format before index shards.
"""
