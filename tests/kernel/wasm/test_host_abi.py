"""The reducer envelope: canonical input encoding, strict output decoding, and validation of
outputs against declared schemas and the effect rules. Errors are asserted by code and pointer."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from air import cbor
from air.errors import UsageError, ValueMismatch
from air.types import Ref, parse_type
from air.values import check
from kernel.abi import (
    DomainEventOut,
    EffectOut,
    StepOutput,
    decode_output,
    encode_input,
    validate_output,
)
from kernel.errors import StepRejected

# --- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "hex_cbor"),
    [
        pytest.param(
            (None, "demo/E@1", b"\xf6", None, True),
            "a463637478a16963656c6c5f6d6f6465f5656576656e74a26576616c756541f666736368656d61"
            "6864656d6f2f454031657374617465f66776657273696f6e01",
            id="new-cell-no-key",
        ),
        pytest.param(
            (b"\xa0", "demo/E@1", b"\x01", b"\x61\x61", True),
            "a463637478a2636b65794261616963656c6c5f6d6f6465f5656576656e74a26576616c756541016673"
            "6368656d616864656d6f2f45403165737461746541a06776657273696f6e01",
            id="keyed-cell",
        ),
    ],
)
def test_input_envelope_golden_vectors(args: tuple[Any, ...], hex_cbor: str) -> None:
    assert encode_input(*args).hex() == hex_cbor


_ctx_values = st.one_of(
    st.integers(0, 2**64 - 1), st.text(max_size=8), st.binary(max_size=8), st.booleans()
)


@given(
    state=st.none() | st.binary(max_size=40),
    schema=st.text(max_size=30),
    value=st.binary(max_size=40),
    key=st.none() | st.binary(max_size=20),
    cell_mode=st.booleans(),
    extra=st.dictionaries(
        st.text(max_size=12).filter(lambda k: k not in ("key", "cell_mode")),
        _ctx_values,
        max_size=4,
    ),
)
def test_input_envelope_is_the_canonical_cbor_of_the_envelope(
    state: bytes | None,
    schema: str,
    value: bytes,
    key: bytes | None,
    cell_mode: bool,
    extra: dict[str, Any],
) -> None:
    ctx: dict[str, Any] = {**extra, "cell_mode": cell_mode}
    if key is not None:
        ctx["key"] = key
    envelope = {
        "version": 1,
        "state": state,
        "event": {"schema": schema, "value": value},
        "ctx": ctx,
    }
    encoded = encode_input(state, schema, value, key, cell_mode, extra)
    assert encoded == cbor.dumps(envelope)
    assert cbor.loads(encoded) == envelope


@pytest.mark.parametrize("clash", ["key", "cell_mode"])
def test_extra_ctx_may_not_override_the_envelopes_own_fields(clash: str) -> None:
    with pytest.raises(UsageError):
        encode_input(None, "s", b"\xf6", None, True, {clash: 1})


@pytest.mark.parametrize(
    "args",
    [
        ("state", "s", b"\xf6", None, True),
        (None, b"s", b"\xf6", None, True),
        (None, "s", None, None, True),
        (None, "s", b"\xf6", "k", True),
        (None, "s", b"\xf6", None, 1),
    ],
)
def test_input_arguments_of_the_wrong_type_are_usage_errors(args: tuple[Any, ...]) -> None:
    with pytest.raises(UsageError):
        encode_input(*args)


# --- output decoding ------------------------------------------------------------------------

STATE = cbor.dumps({"count": 1, "events": 1})
TIMER = cbor.dumps({"deliver_at_ns": 5, "key": "a"})
PING = cbor.dumps({"n": 2})


def _out(**fields: Any) -> bytes:
    return cbor.dumps({"state": STATE, **fields})


def test_a_minimal_output_decodes_to_a_step_output() -> None:
    assert decode_output(cbor.dumps({"state": None})) == StepOutput(None)


def test_a_full_output_decodes_every_field() -> None:
    raw = _out(
        domain_events=[{"schema": "demo/Ping@1", "value": PING, "key": cbor.dumps("k")}],
        effects=[{"kind": "timer.set", "params": TIMER, "cap_slot": "t"}],
        ann=cbor.dumps("note"),
    )
    out = decode_output(raw)
    assert out == StepOutput(
        STATE,
        (DomainEventOut("demo/Ping@1", PING, cbor.dumps("k")),),
        (EffectOut("timer.set", TIMER, "t"),),
        cbor.dumps("note"),
    )
    assert out.values is not None
    assert (out.values.state, out.values.events, out.values.params, out.values.ann) == (
        {"count": 1, "events": 1},
        ({"n": 2},),
        ({"deliver_at_ns": 5, "key": "a"},),
        "note",
    )


def test_empty_event_and_effect_lists_are_accepted() -> None:
    assert decode_output(_out(domain_events=[], effects=[])) == StepOutput(STATE)


_NON_CANONICAL = bytes.fromhex("a16573746174651801")  # {"state": 1} with a non-shortest int
_BAD_PAYLOAD = STATE + b"\x00"


@pytest.mark.parametrize(
    ("raw", "code", "pointer"),
    [
        pytest.param(b"\xff", "output_not_cbor", "/", id="not-cbor"),
        pytest.param(_NON_CANONICAL, "output_not_cbor", "/", id="non-canonical"),
        pytest.param(cbor.dumps([1]), "output_shape", "/", id="not-a-map"),
        pytest.param(cbor.dumps({}), "output_shape", "/state", id="no-state"),
        pytest.param(cbor.dumps({"state": "x"}), "output_shape", "/state", id="state-text"),
        pytest.param(_out(extra=1), "output_unknown_key", "/extra", id="unknown-key"),
        pytest.param(_out(**{"a/b": 1}), "output_unknown_key", "/a~1b", id="escaped-pointer"),
        pytest.param(
            cbor.dumps({"state": _BAD_PAYLOAD}), "payload_not_cbor", "/state", id="state-payload"
        ),
        pytest.param(
            _out(domain_events={}), "output_shape", "/domain_events", id="events-not-list"
        ),
        pytest.param(
            _out(domain_events=[1]), "output_shape", "/domain_events/0", id="event-not-map"
        ),
        pytest.param(
            _out(domain_events=[{"schema": "s"}]),
            "output_shape",
            "/domain_events/0/value",
            id="event-no-value",
        ),
        pytest.param(
            _out(domain_events=[{"schema": "s", "value": PING, "key": None}]),
            "output_shape",
            "/domain_events/0/key",
            id="event-key-null",
        ),
        pytest.param(
            _out(domain_events=[{"schema": "s", "value": _BAD_PAYLOAD}]),
            "payload_not_cbor",
            "/domain_events/0/value",
            id="event-payload",
        ),
        pytest.param(
            _out(domain_events=[{"schema": "s", "value": PING, "key": b"\xff"}]),
            "payload_not_cbor",
            "/domain_events/0/key",
            id="event-key-payload",
        ),
        pytest.param(
            _out(effects=[{"kind": 1, "params": TIMER}]),
            "output_shape",
            "/effects/0/kind",
            id="kind-int",
        ),
        pytest.param(
            _out(effects=[{"kind": "timer.set", "params": TIMER, "cap_slot": None}]),
            "output_shape",
            "/effects/0/cap_slot",
            id="cap-slot-null",
        ),
        pytest.param(
            _out(effects=[{"kind": "timer.set", "params": TIMER, "x": 1}]),
            "output_unknown_key",
            "/effects/0/x",
            id="effect-unknown-key",
        ),
        pytest.param(_out(ann=None), "output_shape", "/ann", id="ann-null"),
    ],
)
def test_off_contract_output_is_rejected_with_a_code_and_pointer(
    raw: bytes, code: str, pointer: str
) -> None:
    with pytest.raises(StepRejected) as caught:
        decode_output(raw, module="blake3:m")
    assert (caught.value.code, caught.value.pointer, caught.value.module) == (
        code,
        pointer,
        "blake3:m",
    )


# --- output validation ----------------------------------------------------------------------

SCHEMAS = {
    "demo/CounterState@1": parse_type({"record": {"count": "nat", "events": "nat"}}),
    "demo/Ping@1": parse_type({"record": {"n": "nat"}}),
    "demo/Ann@1": parse_type("text"),
    "sys/TimerSetParams@1": parse_type(
        {"record": {"deliver_at_ns": "nat", "key": {"option": "text"}}}
    ),
}


def _check(name: str, obj: Any) -> None:
    if name not in SCHEMAS:
        raise ValueMismatch("/", "schema.unknown", f"unknown schema {name}")
    check(Ref(name), obj, SCHEMAS)


def _validate(raw: bytes, **overrides: Any) -> None:
    rules: dict[str, Any] = {
        "check": _check,
        "state_schema": "demo/CounterState@1",
        "effects_emitted": {"timer.set"},
        "event_schemas": {"demo/Ping@1"},
        "ann_schema": "demo/Ann@1",
        "cap_slots": {"t"},
        "module": "blake3:m",
        **overrides,
    }
    validate_output(decode_output(raw), **rules)


def test_an_output_that_matches_its_schemas_is_valid() -> None:
    _validate(
        _out(
            domain_events=[{"schema": "demo/Ping@1", "value": PING}],
            effects=[{"kind": "timer.set", "params": TIMER, "cap_slot": "t"}],
            ann=cbor.dumps("note"),
        )
    )


def test_a_null_state_needs_no_schema_check() -> None:
    _validate(cbor.dumps({"state": None}), state_schema="demo/Nope@1")


def test_a_hand_built_step_output_is_validated_by_decoding_its_payloads() -> None:
    bad = StepOutput(cbor.dumps({"count": -1, "events": 0}))
    with pytest.raises(StepRejected) as caught:
        validate_output(
            bad, check=_check, state_schema="demo/CounterState@1", effects_emitted=set()
        )
    assert (caught.value.code, caught.value.pointer) == ("schema_mismatch", "/state/count")


_TWO_EFFECTS = [{"kind": "timer.set", "params": TIMER}, {"kind": "timer.set", "params": TIMER}]


@pytest.mark.parametrize(
    ("raw", "overrides", "code", "pointer"),
    [
        pytest.param(
            cbor.dumps({"state": cbor.dumps({"count": "x", "events": 1})}),
            {},
            "schema_mismatch",
            "/state/count",
            id="state-field",
        ),
        pytest.param(
            cbor.dumps({"state": cbor.dumps({"count": 1})}),
            {},
            "schema_mismatch",
            "/state/events",
            id="state-missing-field",
        ),
        pytest.param(
            cbor.dumps({"state": cbor.dumps(1)}), {}, "schema_mismatch", "/state", id="state-root"
        ),
        pytest.param(
            _out(domain_events=[{"schema": "demo/Other@1", "value": PING}]),
            {},
            "event_schema_unknown",
            "/domain_events/0/schema",
            id="event-not-emittable",
        ),
        pytest.param(
            _out(domain_events=[{"schema": "demo/Ping@1", "value": cbor.dumps({"n": "2"})}]),
            {},
            "schema_mismatch",
            "/domain_events/0/value/n",
            id="event-value",
        ),
        pytest.param(
            _out(domain_events=[{"schema": "demo/Nope@1", "value": PING}]),
            {"event_schemas": None},
            "schema_mismatch",
            "/domain_events/0/value",
            id="event-unknown-schema",
        ),
        pytest.param(
            _out(effects=_TWO_EFFECTS), {}, "too_many_effects", "/effects/1", id="two-effects"
        ),
        pytest.param(
            _out(effects=[{"kind": "http.request", "params": TIMER}]),
            {"effects_emitted": {"http.request"}},
            "effect_not_reducer_scoped",
            "/effects/0/kind",
            id="plan-only-effect",
        ),
        pytest.param(
            _out(effects=[{"kind": "blob.put", "params": TIMER}]),
            {},
            "effect_not_declared",
            "/effects/0/kind",
            id="undeclared-effect",
        ),
        pytest.param(
            _out(
                effects=[
                    {"kind": "timer.set", "params": cbor.dumps({"deliver_at_ns": -5, "key": None})}
                ]
            ),
            {},
            "schema_mismatch",
            "/effects/0/params/deliver_at_ns",
            id="effect-params",
        ),
        pytest.param(
            _out(effects=[{"kind": "acme.ping", "params": TIMER}]),
            {"effects_emitted": {"acme.ping"}, "reducer_effect_kinds": {"acme.ping"}},
            "effect_params_unknown",
            "/effects/0/params",
            id="effect-without-params-schema",
        ),
        pytest.param(
            _out(effects=[{"kind": "timer.set", "params": TIMER, "cap_slot": "zz"}]),
            {},
            "cap_slot_unknown",
            "/effects/0/cap_slot",
            id="cap-slot",
        ),
        pytest.param(
            _out(ann=cbor.dumps("x")),
            {"ann_schema": None},
            "ann_not_declared",
            "/ann",
            id="ann-undeclared",
        ),
        pytest.param(_out(ann=cbor.dumps(1)), {}, "schema_mismatch", "/ann", id="ann-type"),
    ],
)
def test_an_output_off_its_schemas_or_effect_rules_is_rejected(
    raw: bytes, overrides: dict[str, Any], code: str, pointer: str
) -> None:
    with pytest.raises(StepRejected) as caught:
        _validate(raw, **overrides)
    assert (caught.value.code, caught.value.pointer, caught.value.module) == (
        code,
        pointer,
        "blake3:m",
    )
    if code == "schema_mismatch":
        assert isinstance(caught.value.__cause__, ValueMismatch)


def test_custom_reducer_effects_are_checked_against_their_params_schema() -> None:
    raw = _out(effects=[{"kind": "acme.ping", "params": PING}])
    _validate(
        raw,
        effects_emitted={"acme.ping"},
        reducer_effect_kinds={"acme.ping"},
        effect_params={"acme.ping": "demo/Ping@1"},
    )


# --- the envelope decoder accepts exactly canonical CBOR ------------------------------------

_STATE_KEY = b"\x65state"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\xbf" + _STATE_KEY + b"\xf6\xff", id="indefinite-map"),
        pytest.param(b"\xa1\x78\x05state\xf6", id="long-form-key-length"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\x58\x01\x00", id="long-form-bytes-length"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\x5f\x41\x00\xff", id="indefinite-bytes"),
        pytest.param(b"\xa2" + _STATE_KEY + b"\xf6" + _STATE_KEY + b"\xf6", id="duplicate-key"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\xd8\x18\x41\x00", id="tagged-bytes"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\xd8\x1c\x41\x00", id="shared-ref-tag"),
        pytest.param(b"\xa2" + _STATE_KEY + b"\xf6\x63ann\x41\x00", id="keys-out-of-order"),
        pytest.param(cbor.dumps({"state": None}) + b"\x00", id="trailing-byte"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\xf9\x3c\x00", id="float"),
        pytest.param(b"\xa1" + _STATE_KEY + b"\xf7", id="undefined"),
    ],
)
def test_non_canonical_or_off_model_output_is_never_accepted(raw: bytes) -> None:
    with pytest.raises(StepRejected) as caught:
        decode_output(raw)
    assert caught.value.code in ("output_not_cbor", "output_shape")


_payload = st.sampled_from([STATE, PING, TIMER, cbor.dumps(None)])
_event = st.fixed_dictionaries(
    {"schema": st.text(max_size=5), "value": _payload}, optional={"key": _payload}
)
_effect = st.fixed_dictionaries(
    {"kind": st.text(max_size=5), "params": _payload}, optional={"cap_slot": st.text(max_size=3)}
)
_output = st.fixed_dictionaries(
    {"state": st.none() | _payload},
    optional={
        "domain_events": st.lists(_event, max_size=2),
        "effects": st.lists(_effect, max_size=2),
        "ann": _payload,
    },
)


def _shuffled(obj: Any, rnd: Any) -> Any:
    if isinstance(obj, dict):
        keys = list(obj)
        rnd.shuffle(keys)
        return {k: _shuffled(obj[k], rnd) for k in keys}
    if isinstance(obj, list):
        return [_shuffled(x, rnd) for x in obj]
    return obj


@given(output=_output, rnd=st.randoms(use_true_random=False))
def test_the_envelope_decoder_accepts_exactly_what_air_cbor_loads_accepts(
    output: dict[str, Any], rnd: Any
) -> None:
    raw = cbor2.dumps(_shuffled(output, rnd))  # keeps insertion order: canonical or not
    if raw != cbor.dumps(output):
        with pytest.raises(StepRejected) as caught:
            decode_output(raw)
        assert caught.value.code == "output_not_cbor"
        return
    assert cbor.loads(raw) == output
    decoded = decode_output(raw)
    assert (decoded.state_cbor, decoded.ann_cbor) == (output["state"], output.get("ann"))
    assert len(decoded.domain_events) == len(output.get("domain_events", []))
