"""The deterministic core: routing, cells, scheduler, reducer invocation and the WASM host.

Pure: nothing here reads files, clocks, randomness or the environment; storage enters through
narrow interfaces (``kernel.wasm.ModuleCache``, the journal and cell stores).
"""
