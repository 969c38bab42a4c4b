/*
 * demo/TimerSM@1 -- AgentOS's ladder rung 01 ("hello-timer"), our reducer for its AIR as shipped
 * (manifests/agentos-01-hello-timer/).
 *
 * One world-wide state (no key_schema), demo/TimerState@1 {pc: Idle|Awaiting|Done|TimedOut,
 * key, deadline_ns, fired_key: options}; a null state is Idle with every option null.
 *   demo/TimerEvent@1 Start {deliver_at_ns, key}: taken unless a timer is already Awaiting (then
 *       nothing changes). Records key and deadline_ns, clears fired_key; deliver_at_ns 0 is Done
 *       at once, otherwise pc = Awaiting and one effect timer.set {deliver_at_ns, key} through
 *       cap slot "default".
 *   sys/TimerFired@1 (the kernel delivers the receipt under its own schema), or the same record
 *       as demo/TimerEvent@1's Fired case: while Awaiting, pc = Done and fired_key = key;
 *       otherwise nothing changes.
 * Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_AWAITING, PC_DONE, PC_TIMED_OUT };

static const char *const PC_NAMES[] = {"Idle", "Awaiting", "Done", "TimedOut"};

static const uint8_t CBOR_NULL[] = {0xf6};

static int read_pc(cbor_span state, int *pc) {
    cbor_span v, tag, unit;
    WORLD_TRY(world_rec_field(state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    for (int i = 0; i < 4; i++) {
        if (world_str_eq(tag, PC_NAMES[i])) {
            *pc = i;
            return WORLD_OK;
        }
    }
    return WORLD_EINVAL;
}

static int timer_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1};
    int pc = PC_IDLE;
    cbor_span key = null, deadline = null, fired_key = null;
    cbor_span fired; /* the TimerFired record, when this event is one */
    bool is_fired = false;

    if (in->has_state) {
        WORLD_TRY(read_pc(in->state, &pc));
        WORLD_TRY(world_rec_field(in->state, "key", &key));
        WORLD_TRY(world_rec_field(in->state, "deadline_ns", &deadline));
        WORLD_TRY(world_rec_field(in->state, "fired_key", &fired_key));
    }
    if (world_schema_is(&in->event, "sys/TimerFired@1")) {
        fired = in->event.value;
        is_fired = true;
    } else if (world_schema_is(&in->event, "demo/TimerEvent@1")) {
        cbor_span tag, value;
        WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
        if (world_str_eq(tag, "Fired")) {
            fired = value;
            is_fired = true;
        } else if (world_str_eq(tag, "Start")) {
            uint64_t at;
            cbor_span start_key;
            WORLD_TRY(world_rec_uint(value, "deliver_at_ns", &at));
            WORLD_TRY(world_rec_field(value, "key", &start_key));
            if (pc != PC_AWAITING) {
                WORLD_TRY(world_rec_field(value, "deliver_at_ns", &deadline));
                key = start_key;
                fired_key = null;
                pc = at == 0 ? PC_DONE : PC_AWAITING;
                if (pc == PC_AWAITING) {
                    cbor_map params;
                    cbor_map_init(&params);
                    cbor_put_raw(cbor_map_key(&params, "deliver_at_ns"), deadline);
                    cbor_put_raw(cbor_map_key(&params, "key"), key);
                    cbor_put_map(world_effect(out, "timer.set", "default"), &params);
                }
            }
        } else {
            return WORLD_EINVAL;
        }
    } else {
        return WORLD_EINVAL;
    }
    if (is_fired) {
        cbor_span status;
        WORLD_TRY(world_rec_text(fired, "status", &status)); /* the shape is a receipt's */
        if (pc == PC_AWAITING && !cbor_is_null(deadline)) {
            pc = PC_DONE;
            fired_key = key;
        }
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[pc]);
    cbor_put_raw(cbor_map_key(&rec, "key"), key);
    cbor_put_raw(cbor_map_key(&rec, "deadline_ns"), deadline);
    cbor_put_raw(cbor_map_key(&rec, "fired_key"), fired_key);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(timer_step)
