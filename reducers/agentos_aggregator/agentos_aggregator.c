/*
 * demo/Aggregator@1 -- AgentOS's ladder rung 04 ("aggregator", fan-out and join), our reducer
 * for its AIR as shipped (manifests/agentos-04-aggregator/).
 *
 * One world-wide state (no key_schema), demo/AggregatorState@1 {pc: Idle|Running|Done,
 * next_request_id: nat, pending_request: option<nat>, current_topic: option<text>,
 * pending_targets: list<text>, last_responses: list<AggregateResponse>}; a null state is Idle,
 * next_request_id 0, the options null and the lists empty.
 *   demo/AggregatorEvent@1 Start {topic, primary, secondary, tertiary} (each target {name,
 *       url, method}): ignored while Running; otherwise the request takes next_request_id
 *       (which counts on), pending_request = it, current_topic = topic, pc = Running,
 *       pending_targets = the three names, last_responses emptied, and the reducer emits the
 *       domain intent demo/AggregateRequested@1 {request_id, topic, primary, secondary,
 *       tertiary}: the trigger starts demo/aggregator_plan@1, which fans out three GETs and
 *       joins their receipts, however they arrive.
 *   AggregateComplete {request_id, topic, primary, secondary, tertiary} (each a response
 *       {source, status, body_preview}): ignored unless request_id is the pending one;
 *       otherwise pending_request = null, pc = Done, current_topic = topic, pending_targets
 *       emptied, last_responses = [primary, secondary, tertiary].
 * As AgentOS's reducer does. Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_RUNNING, PC_DONE };

static const char *const PC_NAMES[] = {"Idle", "Running", "Done"};
static const char *const TARGETS[] = {"primary", "secondary", "tertiary"};
static const uint8_t CBOR_NULL[] = {0xf6};
static const uint8_t CBOR_EMPTY_LIST[] = {0x80};

typedef struct {
    int pc;
    uint64_t next_request_id;
    cbor_span pending, topic, targets, responses; /* encoded, as the schema has them */
} agg_state;

static int read_state(const world_input *in, agg_state *s) {
    const cbor_span null = {CBOR_NULL, 1}, empty = {CBOR_EMPTY_LIST, 1};
    cbor_span v, tag, unit;
    s->pc = PC_IDLE;
    s->next_request_id = 0;
    s->pending = s->topic = null;
    s->targets = s->responses = empty;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->pc = -1;
    for (int i = 0; i < 3; i++)
        if (world_str_eq(tag, PC_NAMES[i])) s->pc = i;
    if (s->pc < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(in->state, "next_request_id", &s->next_request_id));
    WORLD_TRY(world_rec_field(in->state, "pending_request", &s->pending));
    WORLD_TRY(world_rec_field(in->state, "current_topic", &s->topic));
    WORLD_TRY(world_rec_field(in->state, "pending_targets", &s->targets));
    return world_rec_field(in->state, "last_responses", &s->responses);
}

/* An event ignored: the state stays as it came in. */
static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

/* [field(rec, "primary"), field(rec, "secondary"), field(rec, "tertiary")] (with `name`, each
   one's name field instead), encoded. */
static int three(cbor_span rec, const char *name, cbor_span *out) {
    world_buf b = {0};
    cbor_put_array(&b, 3);
    for (int i = 0; i < 3; i++) {
        cbor_span item;
        WORLD_TRY(world_rec_field(rec, TARGETS[i], &item));
        if (name) {
            cbor_span text;
            WORLD_TRY(world_rec_text(item, name, &text));
            WORLD_TRY(world_rec_field(item, name, &item));
        }
        cbor_put_raw(&b, item);
    }
    *out = world_buf_span(&b);
    return WORLD_OK;
}

static int aggregate_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1}, empty = {CBOR_EMPTY_LIST, 1};
    agg_state s;
    cbor_span tag, value, topic;
    if (!world_schema_is(&in->event, "demo/AggregatorEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
    WORLD_TRY(world_rec_text(value, "topic", &topic));
    WORLD_TRY(world_rec_field(value, "topic", &topic));

    if (world_str_eq(tag, "Start")) {
        cbor_span names;
        WORLD_TRY(three(value, "name", &names));
        if (s.pc == PC_RUNNING) return keep(in, out);
        uint64_t request_id = s.next_request_id;
        s.next_request_id = request_id == UINT64_MAX ? request_id : request_id + 1;
        world_buf pending = {0};
        cbor_put_uint(&pending, request_id);
        s.pending = world_buf_span(&pending);
        s.topic = topic;
        s.pc = PC_RUNNING;
        s.targets = names;
        s.responses = empty;
        cbor_map intent;
        cbor_map_init(&intent);
        cbor_put_uint(cbor_map_key(&intent, "request_id"), request_id);
        cbor_put_raw(cbor_map_key(&intent, "topic"), topic);
        for (int i = 0; i < 3; i++) {
            cbor_span target;
            WORLD_TRY(world_rec_field(value, TARGETS[i], &target));
            cbor_put_raw(cbor_map_key(&intent, TARGETS[i]), target);
        }
        cbor_put_map(world_emit(out, "demo/AggregateRequested@1"), &intent);
    } else if (world_str_eq(tag, "AggregateComplete")) {
        uint64_t request_id, pending_id;
        bool pending;
        cbor_span responses;
        WORLD_TRY(world_rec_uint(value, "request_id", &request_id));
        WORLD_TRY(three(value, NULL, &responses));
        WORLD_TRY(cbor_read_opt_uint(s.pending, &pending, &pending_id));
        if (!pending || pending_id != request_id) return keep(in, out);
        s.pending = null;
        s.pc = PC_DONE;
        s.topic = topic;
        s.targets = empty;
        s.responses = responses;
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[s.pc]);
    cbor_put_uint(cbor_map_key(&rec, "next_request_id"), s.next_request_id);
    cbor_put_raw(cbor_map_key(&rec, "pending_request"), s.pending);
    cbor_put_raw(cbor_map_key(&rec, "current_topic"), s.topic);
    cbor_put_raw(cbor_map_key(&rec, "pending_targets"), s.targets);
    cbor_put_raw(cbor_map_key(&rec, "last_responses"), s.responses);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(aggregate_step)
