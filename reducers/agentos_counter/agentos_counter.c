/*
 * demo/CounterSM@1 -- AgentOS's ladder rung 00 ("counter"), our reducer for its AIR as shipped
 * (manifests/agentos-00-counter/).
 *
 * One world-wide state (no key_schema), demo/CounterState@1 {pc: Idle|Counting|Done,
 * remaining: nat}; a null state is {pc: Idle, remaining: 0}. Events: demo/CounterEvent@1,
 *   Start {target}: pc = Counting with remaining = target, or Done with 0 when target is 0
 *                   (a Start restarts the count whatever the pc);
 *   Tick:           while Counting, remaining -= 1, and pc = Done when it reaches 0;
 *                   otherwise nothing changes.
 * Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_COUNTING, PC_DONE };

static int read_pc(cbor_span state, int *pc) {
    cbor_span v, tag, unit;
    WORLD_TRY(world_rec_field(state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    if (world_str_eq(tag, "Idle")) *pc = PC_IDLE;
    else if (world_str_eq(tag, "Counting")) *pc = PC_COUNTING;
    else if (world_str_eq(tag, "Done")) *pc = PC_DONE;
    else return WORLD_EINVAL;
    return WORLD_OK;
}

static int counter_step(const world_input *in, world_out *out) {
    static const char *const names[] = {"Idle", "Counting", "Done"};
    int pc = PC_IDLE;
    uint64_t remaining = 0;
    cbor_span tag, value;

    if (!world_schema_is(&in->event, "demo/CounterEvent@1")) return WORLD_EINVAL;
    if (in->has_state) {
        WORLD_TRY(read_pc(in->state, &pc));
        WORLD_TRY(world_rec_uint(in->state, "remaining", &remaining));
    }
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
    if (world_str_eq(tag, "Start")) {
        WORLD_TRY(world_rec_uint(value, "target", &remaining));
        pc = remaining == 0 ? PC_DONE : PC_COUNTING;
    } else if (world_str_eq(tag, "Tick")) {
        if (pc == PC_COUNTING && remaining > 0 && --remaining == 0) pc = PC_DONE;
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), names[pc]);
    cbor_put_uint(cbor_map_key(&rec, "remaining"), remaining);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(counter_step)
