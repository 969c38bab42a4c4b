/*
 * demo/Timer@1 -- a keyed reducer that arms timers through the timer.set micro-effect.
 *
 * Events: demo/TimerEvent@1 = {key: text, deliver_at_ns: nat}
 *         sys/TimerFired@1  = {intent_hash, status, requested: {deliver_at_ns, key},
 *                              receipt: {delivered_at_ns, key}}
 * State   demo/TimerState@1 = {armed: nat, fired: nat, last_fired_ns: option<nat>}
 *
 * TimerEvent counts `armed` and emits one effect timer.set with params
 * sys/TimerSetParams@1 {deliver_at_ns, key: <the cell key>}; the key travels in the params so
 * that the receipt can find its cell again in v1 mode. TimerFired counts `fired` and records
 * receipt.delivered_at_ns (whatever the receipt's status: the contract counts every firing).
 */
#include "world.h"

/* v1 mode without ctx.key: TimerEvent carries `key`; TimerFired carries it in `requested`. */
static int timer_key(const world_event *ev, cbor_span *key) {
    cbor_span requested;
    if (world_schema_is(ev, "sys/TimerFired@1")) {
        WORLD_TRY(world_event_field(ev, "requested", &requested));
        WORLD_TRY(world_rec_field(requested, "key", key));
        return cbor_is_null(*key) ? WORLD_ENOTFOUND : WORLD_OK;
    }
    return world_event_field(ev, "key", key);
}

typedef struct {
    uint64_t armed, fired;
    cbor_span last_fired_ns; /* encoded option<nat> */
} timer_state;

static int timer_read(const cbor_span *state, timer_state *s) {
    static const uint8_t null_item[1] = {0xF6};
    s->armed = s->fired = 0;
    s->last_fired_ns.ptr = null_item;
    s->last_fired_ns.len = 1;
    if (!state) return WORLD_OK;
    WORLD_TRY(world_rec_uint(*state, "armed", &s->armed));
    WORLD_TRY(world_rec_uint(*state, "fired", &s->fired));
    return world_rec_field(*state, "last_fired_ns", &s->last_fired_ns);
}

static void timer_write(const timer_state *s, world_out *out) {
    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "armed"), s->armed);
    cbor_put_uint(cbor_map_key(&rec, "fired"), s->fired);
    cbor_put_raw(cbor_map_key(&rec, "last_fired_ns"), s->last_fired_ns);
    cbor_put_map(world_set_state(out), &rec);
}

static int timer_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                      world_out *out) {
    timer_state s;
    cbor_span key_text, field;
    uint64_t at_ns;
    WORLD_TRY(timer_read(state, &s));
    if (world_schema_is(ev, "demo/TimerEvent@1")) {
        WORLD_TRY(cbor_read_text(*key, &key_text)); /* params.key is option<text> */
        WORLD_TRY(world_rec_uint(ev->value, "deliver_at_ns", &at_ns));
        if (__builtin_add_overflow(s.armed, 1u, &s.armed)) return WORLD_ERANGE;
        cbor_map params;
        cbor_map_init(&params);
        cbor_put_uint(cbor_map_key(&params, "deliver_at_ns"), at_ns);
        cbor_put_raw(cbor_map_key(&params, "key"), *key);
        cbor_put_map(world_effect(out, "timer.set", NULL), &params);
    } else if (world_schema_is(ev, "sys/TimerFired@1")) {
        WORLD_TRY(world_event_field(ev, "receipt", &field));
        WORLD_TRY(world_rec_uint(field, "delivered_at_ns", &at_ns));
        WORLD_TRY(world_rec_field(field, "delivered_at_ns", &s.last_fired_ns));
        if (__builtin_add_overflow(s.fired, 1u, &s.fired)) return WORLD_ERANGE;
    } else {
        return WORLD_EINVAL;
    }
    timer_write(&s, out);
    return WORLD_OK;
}

WORLD_CELL_REDUCER(timer_step, timer_key)
