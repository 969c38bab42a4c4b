"""Effects outside the deterministic core: the adapters that do the I/O an allowed intent asks
for, the signing of their receipts, and the pump that connects them to a world's loop.

Invariants:
- The kernel decides (capabilities, policy, budgets) and journals every intent; an adapter
  only ever sees an intent the kernel allowed, and replay never calls one.
- An adapter's ``submit`` never blocks on I/O and never raises for what the world or the
  network does: a failure is a receipt (``error`` or ``timeout``) whose payload keeps its
  schema's shape.
- At most one receipt per intent, exactly one unless the adapter is closed first; an intent
  still in flight when a loop stops is dispatched again by the next (at least once).
- A receipt is signed with the world's key where it is taken and verified before it is
  journaled; a forged, altered, unknown or duplicate one is refused or ignored, never
  journaled. Its signature is journaled with it and checked again by the readers that verify
  a world (``JournalSignatures``), which load the key read-only and report a missing or
  damaged key file instead of creating one.
- A run whose effects are not live (``stub``, ``replay``, ``deny``; a fork's default) sends
  nothing outward: its outward intents get stub, replayed or denied receipts, signed and
  journaled like an adapter's (``_modes`` owns the mode, its file and the choices).
- Close is bounded (``ADAPTER_CLOSE_WAIT_S``) and adapter threads are daemons.

Parts: ``_adapters`` (``Intent``, ``Receipt``, the ``Adapter`` protocol, ``Dispatcher``, the
named limits), ``_timer``, ``_blob`` and ``_http`` (the adapters), ``_secrets`` (secret
values, read by the HTTP adapter at dispatch from ``local.json``'s bindings, never stored),
``_workers`` (their threads and receipt delivery), ``_receipts`` (the world's receipt key, signing and verifying; checking
a journal's receipts), ``_modes`` (effects that are not live: the world's mode file, the
choice of a run's mode, ``NotLive``), ``_pump`` (``EffectPump``: intents out, receipts in; approvals of
parked intents).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from world.effects._adapters import (
        ADAPTER_CLOSE_WAIT_S,
        BACKOFF_BASE_S,
        BACKOFF_MAX_S,
        BLOB_GET_BYTES_MAX,
        HTTP_ATTEMPT_DEADLINE_S,
        HTTP_BODY_INLINE_BYTES_MAX,
        HTTP_BODY_PREVIEW_CHARS,
        HTTP_CONNECT_TIMEOUT_S,
        HTTP_READ_TIMEOUT_S,
        HTTP_RESPONSE_BYTES_MAX,
        HTTP_WORKERS,
        RETRIES_MAX,
        Adapter,
        Dispatcher,
        Done,
        Intent,
        Receipt,
        ReceiptStatus,
        backoff_s,
        http_settings,
        llm_providers,
    )
    from world.effects._blob import BlobAdapter
    from world.effects._http import HttpAdapter
    from world.effects._modes import (
        EFFECTS_MODES,
        MODE_FILE,
        STUB_ADAPTER_ID,
        STUB_STATUS,
        ChosenMode,
        EffectsMode,
        ModeFile,
        NotLive,
        choose_mode,
        failed_payload,
        fork_mode,
        read_mode_file,
        write_mode_file,
    )
    from world.effects._pump import (
        RECEIPT_WAIT_S,
        EffectPump,
        PumpReport,
        accept_receipt,
        decide_parked,
    )
    from world.effects._receipts import (
        KEY_DIR,
        KEY_FILE,
        KEY_FILE_BYTES_MAX,
        BadReceipt,
        JournalSignatures,
        KeyProblem,
        ReceiptKey,
    )
    from world.effects._timer import Clock, SimClock, TimerAdapter, WallClock

__all__ = [
    "ADAPTER_CLOSE_WAIT_S",
    "BACKOFF_BASE_S",
    "BACKOFF_MAX_S",
    "BLOB_GET_BYTES_MAX",
    "EFFECTS_MODES",
    "HTTP_ATTEMPT_DEADLINE_S",
    "HTTP_BODY_INLINE_BYTES_MAX",
    "HTTP_BODY_PREVIEW_CHARS",
    "HTTP_CONNECT_TIMEOUT_S",
    "HTTP_READ_TIMEOUT_S",
    "HTTP_RESPONSE_BYTES_MAX",
    "HTTP_WORKERS",
    "KEY_DIR",
    "KEY_FILE",
    "KEY_FILE_BYTES_MAX",
    "MODE_FILE",
    "RECEIPT_WAIT_S",
    "RETRIES_MAX",
    "STUB_ADAPTER_ID",
    "STUB_STATUS",
    "Adapter",
    "BadReceipt",
    "BlobAdapter",
    "ChosenMode",
    "Clock",
    "Dispatcher",
    "Done",
    "EffectPump",
    "EffectsMode",
    "HttpAdapter",
    "Intent",
    "JournalSignatures",
    "KeyProblem",
    "ModeFile",
    "NotLive",
    "PumpReport",
    "Receipt",
    "ReceiptKey",
    "ReceiptStatus",
    "SimClock",
    "TimerAdapter",
    "WallClock",
    "accept_receipt",
    "backoff_s",
    "choose_mode",
    "decide_parked",
    "failed_payload",
    "fork_mode",
    "http_settings",
    "llm_providers",
    "read_mode_file",
    "write_mode_file",
]

_WHERE: dict[str, str] = {
    name: module
    for module, names in (
        (
            "world.effects._adapters",
            (
                "Adapter",
                "Dispatcher",
                "Done",
                "Intent",
                "Receipt",
                "ReceiptStatus",
                "backoff_s",
                "http_settings",
                "llm_providers",
                "ADAPTER_CLOSE_WAIT_S",
                "BACKOFF_BASE_S",
                "BACKOFF_MAX_S",
                "BLOB_GET_BYTES_MAX",
                "HTTP_ATTEMPT_DEADLINE_S",
                "HTTP_BODY_INLINE_BYTES_MAX",
                "HTTP_BODY_PREVIEW_CHARS",
                "HTTP_CONNECT_TIMEOUT_S",
                "HTTP_READ_TIMEOUT_S",
                "HTTP_RESPONSE_BYTES_MAX",
                "HTTP_WORKERS",
                "RETRIES_MAX",
            ),
        ),
        (
            "world.effects._timer",
            (
                "Clock",
                "SimClock",
                "TimerAdapter",
                "WallClock",
            ),
        ),
        ("world.effects._blob", ("BlobAdapter",)),
        ("world.effects._http", ("HttpAdapter",)),
        (
            "world.effects._modes",
            (
                "EFFECTS_MODES",
                "MODE_FILE",
                "STUB_ADAPTER_ID",
                "STUB_STATUS",
                "ChosenMode",
                "EffectsMode",
                "ModeFile",
                "NotLive",
                "choose_mode",
                "failed_payload",
                "fork_mode",
                "read_mode_file",
                "write_mode_file",
            ),
        ),
        (
            "world.effects._receipts",
            (
                "ReceiptKey",
                "BadReceipt",
                "JournalSignatures",
                "KeyProblem",
                "KEY_DIR",
                "KEY_FILE",
                "KEY_FILE_BYTES_MAX",
            ),
        ),
        (
            "world.effects._pump",
            (
                "EffectPump",
                "PumpReport",
                "accept_receipt",
                "decide_parked",
                "RECEIPT_WAIT_S",
            ),
        ),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (``world._face``)."""
    from world._face import export

    return export("world.effects", _WHERE, name, globals())
