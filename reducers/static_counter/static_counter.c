/*
 * demo/StaticCounter@1 -- deliberately misbehaving: it keeps a counter in a C `static`.
 *
 * State {steps: nat, static_steps: nat}; any event. `steps` is carried the right way, through
 * the state; `static_steps` is a C static incremented on every call. A host that instantiates
 * the module afresh for every step (SPEC 5: nothing carries over except through `state`) always
 * sees static_steps == 1; a host that reused an instance would see it climb. Tests run it both
 * ways and require identical output.
 */
#include "world.h"

static uint64_t static_steps; /* the forbidden carrier: lives in linear memory */

static int static_counter_step(const world_input *in, world_out *out) {
    uint64_t steps = 0;
    if (in->has_state) WORLD_TRY(world_rec_uint(in->state, "steps", &steps));
    if (__builtin_add_overflow(steps, 1u, &steps)) return WORLD_ERANGE;
    static_steps++;

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "steps"), steps);
    cbor_put_uint(cbor_map_key(&rec, "static_steps"), static_steps);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(static_counter_step)
