/*
 * demo/FetchNotify@1 -- AgentOS's ladder rung 03 ("fetch-notify"), our reducer for its AIR as
 * shipped (manifests/agentos-03-fetch-notify/).
 *
 * One world-wide state (no key_schema), demo/FetchNotifyState@1 {pc: Idle|Fetching|Done,
 * next_request_id: nat, pending_request: option<nat>, last_status: option<int>,
 * last_body_ref: option<hash>}; a null state is Idle, next_request_id 0, every option null.
 *   demo/FetchNotifyEvent@1 Start {url, method}: ignored while Fetching; otherwise the request
 *       takes next_request_id (which counts on), pending_request = it, pc = Fetching, the last
 *       result cleared, and the reducer emits the domain intent demo/FetchRequest@1
 *       {request_id, url, method}: the manifest's trigger starts demo/fetch_plan@1 with it.
 *   NotifyComplete {status, body_preview} (the plan raises it with the HTTP receipt's fields):
 *       ignored when nothing is pending; otherwise pending_request = null, pc = Done,
 *       last_status = status.
 * What differs from AgentOS's reducer: its Rust state keeps last_body_preview, a field its own
 * schema does not declare (the schema says last_body_ref: option<hash>); ours keeps the
 * schema, and last_body_ref stays null (the plan passes a preview, not a ref). Any other event
 * schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_FETCHING, PC_DONE };

static const char *const PC_NAMES[] = {"Idle", "Fetching", "Done"};
static const uint8_t CBOR_NULL[] = {0xf6};

typedef struct {
    int pc;
    uint64_t next_request_id;
    cbor_span pending, last_status, last_body_ref; /* encoded options */
} fetch_state;

static int read_state(const world_input *in, fetch_state *s) {
    const cbor_span null = {CBOR_NULL, 1};
    cbor_span v, tag, unit;
    s->pc = PC_IDLE;
    s->next_request_id = 0;
    s->pending = s->last_status = s->last_body_ref = null;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->pc = -1;
    for (int i = 0; i < 3; i++)
        if (world_str_eq(tag, PC_NAMES[i])) s->pc = i;
    if (s->pc < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(in->state, "next_request_id", &s->next_request_id));
    WORLD_TRY(world_rec_field(in->state, "pending_request", &s->pending));
    WORLD_TRY(world_rec_field(in->state, "last_status", &s->last_status));
    return world_rec_field(in->state, "last_body_ref", &s->last_body_ref);
}

/* An event ignored: the state stays as it came in. */
static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

static int fetch_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1};
    fetch_state s;
    cbor_span tag, value;
    if (!world_schema_is(&in->event, "demo/FetchNotifyEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));

    if (world_str_eq(tag, "Start")) {
        cbor_span url, method;
        WORLD_TRY(world_rec_text(value, "url", &url));
        WORLD_TRY(world_rec_text(value, "method", &method));
        if (s.pc == PC_FETCHING) return keep(in, out);
        uint64_t request_id = s.next_request_id;
        s.next_request_id = request_id == UINT64_MAX ? request_id : request_id + 1;
        world_buf pending = {0};
        cbor_put_uint(&pending, request_id);
        s.pending = world_buf_span(&pending);
        s.pc = PC_FETCHING;
        s.last_status = s.last_body_ref = null;
        cbor_map intent;
        cbor_map_init(&intent);
        cbor_put_uint(cbor_map_key(&intent, "request_id"), request_id);
        cbor_put_text(cbor_map_key(&intent, "url"), url.ptr, url.len);
        cbor_put_text(cbor_map_key(&intent, "method"), method.ptr, method.len);
        cbor_put_map(world_emit(out, "demo/FetchRequest@1"), &intent);
    } else if (world_str_eq(tag, "NotifyComplete")) {
        cbor_span status, preview;
        int64_t code;
        WORLD_TRY(world_rec_int(value, "status", &code));
        WORLD_TRY(world_rec_text(value, "body_preview", &preview));
        if (cbor_is_null(s.pending)) return keep(in, out);
        WORLD_TRY(world_rec_field(value, "status", &status));
        s.pending = null;
        s.pc = PC_DONE;
        s.last_status = status;
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[s.pc]);
    cbor_put_uint(cbor_map_key(&rec, "next_request_id"), s.next_request_id);
    cbor_put_raw(cbor_map_key(&rec, "pending_request"), s.pending);
    cbor_put_raw(cbor_map_key(&rec, "last_status"), s.last_status);
    cbor_put_raw(cbor_map_key(&rec, "last_body_ref"), s.last_body_ref);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(fetch_step)
