/*
 * sdk_probe -- a test fixture that exercises the SDK's reader and writer directly.
 *
 * Not an example and not committed as .wasm: tests/reducers/test_reducers_behaviour.py builds it into a
 * temporary directory. Non-keyed; the new state depends only on the event:
 *
 *   probe/Echo@1  value: any AIR value. State: the value decoded with the typed readers and
 *                 re-encoded with the writers; map entries are handed to the cbor_map builder
 *                 in reverse order, so its sort has real work to do. Must equal the input.
 *   probe/Map@1   value: [[key, value], ...] in any order. State: the canonical map built with
 *                 cbor_map_key_raw + cbor_put_map (a duplicate key traps).
 *   probe/Emit@1  value: n. Emits n domain events (beyond WORLD_MAX_DOMAIN_EVENTS traps) and,
 *                 for n == 0, two effects (traps: at most one per step).
 *   sys/StateUpgrade@1 (world_event_is_upgrade): state {from_module, from_schema, state}, the
 *                 fields as world_upgrade_read gives them (a malformed value traps).
 *   probe/IsUpgrade@1  value: anything. State: world_event_is_upgrade of the event (false).
 */
#include "world.h"

static int echo(cbor_span v, world_buf *b);

static int echo_map(cbor_span v, world_buf *b) {
    cbor_iter it;
    WORLD_TRY(cbor_map_begin(v, &it));
    uint32_t n = (uint32_t)cbor_iter_left(&it);
    cbor_entry *entries = (cbor_entry *)world_alloc((n ? n : 1) * (uint32_t)sizeof(cbor_entry));
    for (uint32_t i = 0; i < n; i++) {
        if (cbor_next_entry(&it, &entries[i].key, &entries[i].val) != 1) return WORLD_EMALFORMED;
    }
    cbor_map m;
    cbor_map_init(&m);
    for (uint32_t i = n; i-- > 0;) {
        world_buf key = {0};
        WORLD_TRY(echo(entries[i].key, &key));
        WORLD_TRY(echo(entries[i].val, cbor_map_key_raw(&m, world_buf_span(&key))));
    }
    cbor_put_map(b, &m);
    return WORLD_OK;
}

static int echo(cbor_span v, world_buf *b) {
    uint64_t u;
    int64_t i;
    bool flag;
    cbor_span s, item;
    cbor_iter it;
    uint8_t dec[16];
    int rc;
    if (v.len == 0) return WORLD_EMALFORMED;
    switch (v.ptr[0] >> 5) {
    case CBOR_UINT:
        WORLD_TRY(cbor_read_uint(v, &u));
        cbor_put_uint(b, u);
        return WORLD_OK;
    case CBOR_NINT:
        WORLD_TRY(cbor_read_int(v, &i));
        cbor_put_int(b, i);
        return WORLD_OK;
    case CBOR_BYTES:
        WORLD_TRY(cbor_read_bytes(v, &s));
        cbor_put_bytes(b, s.ptr, s.len);
        return WORLD_OK;
    case CBOR_TEXT:
        WORLD_TRY(cbor_read_text(v, &s));
        cbor_put_text(b, s.ptr, s.len);
        return WORLD_OK;
    case CBOR_ARRAY:
        WORLD_TRY(cbor_array_begin(v, &it));
        cbor_put_array(b, (uint32_t)cbor_iter_left(&it));
        while ((rc = cbor_next(&it, &item)) > 0) WORLD_TRY(echo(item, b));
        return rc;
    case CBOR_MAP:
        return echo_map(v, b);
    case CBOR_TAG:
        WORLD_TRY(cbor_read_dec128(v, dec));
        cbor_put_dec128(b, dec);
        return WORLD_OK;
    default:
        if (cbor_is_null(v)) {
            cbor_put_null(b);
            return WORLD_OK;
        }
        WORLD_TRY(cbor_read_bool(v, &flag));
        cbor_put_bool(b, flag);
        return WORLD_OK;
    }
}

static int build_map(cbor_span pairs, world_buf *b) {
    cbor_iter it, pair_it;
    cbor_span pair, key, val;
    cbor_map m;
    int rc;
    cbor_map_init(&m);
    WORLD_TRY(cbor_array_begin(pairs, &it));
    while ((rc = cbor_next(&it, &pair)) > 0) {
        WORLD_TRY(cbor_array_begin(pair, &pair_it));
        if (cbor_next(&pair_it, &key) != 1 || cbor_next(&pair_it, &val) != 1) return WORLD_ETYPE;
        cbor_put_raw(cbor_map_key_raw(&m, key), val);
    }
    WORLD_TRY(rc);
    cbor_put_map(b, &m);
    return WORLD_OK;
}

static int emit(cbor_span count, world_out *out) {
    uint64_t n;
    WORLD_TRY(cbor_read_uint(count, &n));
    for (uint64_t i = 0; i < n; i++) cbor_put_uint(world_emit(out, "probe/Emitted@1"), i);
    if (n == 0) {
        cbor_put_null(world_effect(out, "timer.set", NULL));
        cbor_put_null(world_effect(out, "timer.set", NULL));
    }
    cbor_put_uint(world_set_state(out), n);
    return WORLD_OK;
}

static int upgrade_echo(const world_event *ev, world_out *out) {
    world_upgrade up;
    cbor_map m;
    WORLD_TRY(world_upgrade_read(ev, &up));
    cbor_map_init(&m);
    cbor_put_text(cbor_map_key(&m, "from_module"), up.from_module.ptr, up.from_module.len);
    cbor_put_text(cbor_map_key(&m, "from_schema"), up.from_schema.ptr, up.from_schema.len);
    cbor_put_bytes(cbor_map_key(&m, "state"), up.state.ptr, up.state.len);
    cbor_put_map(world_set_state(out), &m);
    return WORLD_OK;
}

static int probe_step(const world_input *in, world_out *out) {
    const world_event *ev = &in->event;
    if (world_event_is_upgrade(ev)) return upgrade_echo(ev, out);
    if (world_schema_is(ev, "probe/IsUpgrade@1")) {
        cbor_put_bool(world_set_state(out), world_event_is_upgrade(ev));
        return WORLD_OK;
    }
    if (world_schema_is(ev, "probe/Echo@1")) return echo(ev->value, world_set_state(out));
    if (world_schema_is(ev, "probe/Map@1")) return build_map(ev->value, world_set_state(out));
    if (world_schema_is(ev, "probe/Emit@1")) return emit(ev->value, out);
    return WORLD_EINVAL;
}

WORLD_REDUCER(probe_step)
