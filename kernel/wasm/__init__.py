"""The WASM reducer host: load a module by content hash, run one step on a fresh instance.

``_host`` holds ``ReducerHost``; ``_engine`` the deterministic wasmtime engine; ``_fastcall``
and ``_publiccall`` the two ways of calling a step; ``_info`` what a wasm binary imports and
exports; ``_modcache`` the compiled-module cache interface.
"""
