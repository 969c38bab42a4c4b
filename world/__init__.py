"""The I/O shell of the world: the world directory, CAS, journal segments, cell files and index,
snapshots, effect adapters, migration and export.

Everything here that touches files, clocks or the network lives here and not in ``air/`` or
``kernel/``, which stay pure. Modules here may import ``air`` and ``kernel``, never ``cli``.
"""
