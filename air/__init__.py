"""AIR: the world's control plane. Types, values, canonical CBOR, manifests, Expr.

Pure: nothing here reads files, clocks, randomness or the environment.
"""
