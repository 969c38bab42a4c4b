/*
 * demo/Counter@1 -- a keyed counter, written once per cell with the SDK wrapper.
 *
 * Event demo/CounterEvent@1 = {key: text, op: variant {Add: nat, Clear: unit}}
 * State demo/CounterState@1 = {count: nat, events: nat}
 *
 * Add(n) adds n to count and 1 to events; Clear deletes the cell (state null). The same binary
 * serves the keyed world (cell mode) and the v1 world whose state is
 * demo/CounterMap@1 = map<text, demo/CounterState@1>; there the key comes from ctx.key or,
 * without that hint, from the event's `key` field. An overflowing count fails the step.
 */
#include "world.h"

static int counter_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "key", key);
}

static int counter_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                        world_out *out) {
    cbor_span op, tag, arg;
    uint64_t add, count = 0, events = 0;
    (void)key;
    if (!world_schema_is(ev, "demo/CounterEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(world_event_field(ev, "op", &op));
    WORLD_TRY(world_variant_read(op, &tag, &arg));
    if (world_str_eq(tag, "Clear")) {
        world_delete_state(out);
        return WORLD_OK;
    }
    if (!world_str_eq(tag, "Add")) return WORLD_EINVAL;
    WORLD_TRY(cbor_read_uint(arg, &add));
    if (state) {
        WORLD_TRY(world_rec_uint(*state, "count", &count));
        WORLD_TRY(world_rec_uint(*state, "events", &events));
    }
    if (__builtin_add_overflow(count, add, &count)) return WORLD_ERANGE;
    if (__builtin_add_overflow(events, 1u, &events)) return WORLD_ERANGE;

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "count"), count);
    cbor_put_uint(cbor_map_key(&rec, "events"), events);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_CELL_REDUCER(counter_step, counter_key)
