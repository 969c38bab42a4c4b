"""Effects outside the deterministic core: adapters, receipts and the loop that connects them.

``_adapters`` holds the adapter contract and ``Dispatcher``; ``_timer``, ``_blob`` and ``_http``
the adapters; ``_workers`` their threads; ``_receipts`` receipt signing; ``_loop`` the effect
loop of ``world run``.
"""
