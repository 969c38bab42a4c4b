/*
 * demo/Session@1 -- a keyed session that deletes its own cell when closed.
 *
 * Event demo/SessionEvent@1 = {id: text, op: variant {Touch: unit, Close: unit}}
 * State demo/SessionState@1 = {touches: nat}
 *
 * Touch counts; Close returns state null, which deletes the cell (cell mode) or removes the
 * map entry (v1 mode, key from ctx.key or the event's `id`).
 */
#include "world.h"

static int session_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "id", key);
}

static int session_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                        world_out *out) {
    cbor_span op, tag, unit;
    uint64_t touches = 0;
    (void)key;
    if (!world_schema_is(ev, "demo/SessionEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(world_event_field(ev, "op", &op));
    WORLD_TRY(world_variant_read(op, &tag, &unit));
    if (world_str_eq(tag, "Close")) {
        world_delete_state(out);
        return WORLD_OK;
    }
    if (!world_str_eq(tag, "Touch")) return WORLD_EINVAL;
    if (state) WORLD_TRY(world_rec_uint(*state, "touches", &touches));
    if (__builtin_add_overflow(touches, 1u, &touches)) return WORLD_ERANGE;

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "touches"), touches);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_CELL_REDUCER(session_step, session_key)
