/*
 * demo/Counter@2 -- the keyed counter of counter/ with one field added to its state, and an
 * upgrade hook that carries a demo/Counter@1 cell over to the new state.
 *
 * Event demo/CounterEvent@1 = {key: text, op: variant {Add: nat, Clear: unit}}   (unchanged)
 * State demo/CounterState@2 = {count: nat, events: nat, upgraded_from: option<text>}
 *
 * Add(n) adds n to count and 1 to events; Clear deletes the cell (state null); upgraded_from is
 * kept as it is (null for a cell this module created). Same binary for cell mode and v1 mode
 * (map<text, demo/CounterState@2>), as counter/.
 *
 * Upgrade (sys/StateUpgrade@1, see reducers/README.md "Upgrading a cell's state"): from
 * demo/CounterState@1 {count, events} (or, in a v1 world, each entry of demo/CounterMap@1) to
 * {count, events, upgraded_from: the old module's hash}. count and events are carried as they
 * are.
 *
 * Limit: this version keeps count at most COUNTER_V2_MAX = 2^53 - 1, so that every JSON reader
 * (JavaScript's numbers included) sees it exactly. An Add that would pass it fails the step,
 * and the UPGRADE OF AN OLD STATE WHOSE count IS ABOVE IT FAILS (the step traps, the cell
 * stays on the old module's state), as does an upgrade from any other schema than the two above.
 */
#include "world.h"

#define COUNTER_V2_MAX 9007199254740991ull /* 2^53 - 1 */

static int counter_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "key", key);
}

/* Write {count, events, upgraded_from}: `from` is the upgraded_from item (text or null). */
static int counter_put(world_out *out, uint64_t count, uint64_t events, cbor_span from) {
    if (count > COUNTER_V2_MAX) return WORLD_ERANGE;
    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "count"), count);
    cbor_put_uint(cbor_map_key(&rec, "events"), events);
    cbor_put_raw(cbor_map_key(&rec, "upgraded_from"), from);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

static int counter_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                        world_out *out) {
    static const uint8_t null_item[1] = {0xF6};
    cbor_span op, tag, arg, from = {null_item, 1};
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
        WORLD_TRY(world_rec_field(*state, "upgraded_from", &from));
    }
    if (__builtin_add_overflow(count, add, &count)) return WORLD_ERANGE;
    if (__builtin_add_overflow(events, 1u, &events)) return WORLD_ERANGE;
    return counter_put(out, count, events, from);
}

static int counter_upgrade(const cbor_span *old_state, const world_upgrade *up,
                           const cbor_span *key, world_out *out) {
    uint64_t count, events;
    world_buf from = {0};
    (void)key;
    if (!world_str_eq(up->from_schema, "demo/CounterState@1") &&
        !world_str_eq(up->from_schema, "demo/CounterMap@1"))
        return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(*old_state, "count", &count));
    WORLD_TRY(world_rec_uint(*old_state, "events", &events));
    cbor_put_text(&from, up->from_module.ptr, up->from_module.len);
    return counter_put(out, count, events, world_buf_span(&from)); /* count > max: fails */
}

WORLD_CELL_REDUCER_UPGRADABLE(counter_step, counter_key, counter_upgrade)
