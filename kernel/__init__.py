"""The deterministic core: routing, cells, scheduler, reducer invocation and the WASM host.

``core`` is the kernel state machine (routing, ticks, journal records, replay), ``scheduler``
the mailboxes and fair ready queue, ``cells`` the cell-store and CAS interfaces, ``journal``
the journal record types and interface.

Pure: nothing here reads files, clocks, randomness or the environment; storage enters through
narrow interfaces (``modcache.ModuleCache``, the journal and cell stores). The WASM host is
``host`` (load a module, run one step on a fresh instance), ``abi`` (the reducer envelope),
``wasminfo`` (what a wasm binary imports and exports) and ``modcache`` (the compiled-module
cache interface). Import the submodules; this package re-exports nothing.
"""

__all__ = ["abi", "cells", "core", "host", "journal", "modcache", "scheduler", "wasminfo"]
