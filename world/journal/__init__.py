"""The file journal: segments of checksummed frames under ``<world>/journal/``.

``_file`` holds ``FileJournal``; ``_segments`` the frame format and the scan of one segment;
``_seals`` the seals of full segments; ``_commit`` a commit's files and its undo; ``_repair``
the verify report, the repair cut and ``salvage``.
"""
