"""Types of the C extension ``kernel.native._native`` (see ``kernel/native/__init__.py``)."""

from typing import Any

ABI_VERSION: int

def dumps(obj: object, /) -> bytes | None: ...
def loads(data: bytes, /) -> Any: ...
def encode_record(
    seq: int, body: object, kind_cbor: bytes, subject_cbor: bytes, /
) -> bytes | None: ...
def decode_record(payload: bytes, /) -> tuple[int, str, str, Any] | None: ...
def encode_input(
    state_cbor: bytes | None,
    event_schema: str,
    event_value_cbor: bytes,
    key_cbor: bytes | None,
    cell_mode: bool,
    /,
) -> bytes | None: ...
def decode_output(output_cbor: bytes, /) -> Any: ...
def normalise(program: tuple[Any, ...], value: object, /) -> Any: ...

Spliced = tuple[
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    list[tuple[bytes, bytes]],
    list[tuple[bytes, bytes, bytes]],
]
"""shard_splice's answer: five packed fields, the logical bytes, olds and adds."""

def shard_splice(
    keys: bytes,
    entries: bytes,
    entry_ends: bytes,
    states: bytes,
    state_ends: bytes,
    cells: dict[bytes, tuple[Any, bytes] | None],
    inline_bytes_max: int,
    /,
) -> Spliced | None: ...
def find_key(keys: bytes, key_hash: bytes, /) -> int | None: ...
def keys_ascend(keys: bytes, /) -> bool | None: ...
def bind(addresses: tuple[int, ...], /) -> None: ...
def bind_types(shapes: tuple[tuple[type, tuple[str, ...]], ...], /) -> None: ...

class Session:
    def __init__(
        self,
        engine: int,
        pre: int,
        memory_bytes_max: int,
        table_elements_max: int,
        fuel: int,
        output_bytes_max: int,
        retptr: bool,
    ) -> None: ...
    def call(self, input_cbor: bytes, /) -> bytes | tuple[Any, ...]: ...
    def step(
        self,
        state_cbor: bytes | None,
        event_schema: str,
        event_value_cbor: bytes,
        key_cbor: bytes | None,
        cell_mode: bool,
        /,
    ) -> bytes | tuple[Any, ...] | None: ...
    def probe(self) -> tuple[Any, ...] | None: ...
