/*
 * demo/SafeUpgrade@1 -- AgentOS's ladder rung 06 ("safe-upgrade"), our reducer for its AIR as
 * shipped (manifests/agentos-06-safe-upgrade/: air.v1 there, air.v2 in v2/). The same reducer
 * runs under both: the upgrade changes the plan, its capability and its policy, not the cell.
 *
 * One world-wide state (no key_schema), demo/SafeUpgradeState@1 {pc: Idle|Fetching|Completed,
 * next_request_id: nat, pending_request: option<nat>, primary_status: option<int>,
 * follow_status: option<int>, requests_observed: nat}; a null state is Idle, 0, null, null,
 * null, 0.
 *   demo/SafeUpgradeEvent@1 Start {url}: ignored while Fetching; otherwise the request takes
 *       next_request_id (which counts on), pending_request = it, pc = Fetching, the statuses
 *       cleared, requests_observed 0, and the reducer emits the domain intent
 *       demo/UpgradeFetchRequest@1 {request_id, url}: the manifest's trigger starts the fetch
 *       plan of the world's era (demo/fetch_plan@1 before the upgrade, @2 after).
 *   NotifyComplete {primary_status, follow_status, request_count}: ignored when nothing is
 *       pending; otherwise pending_request = null, pc = Completed, primary_status,
 *       follow_status (null when the plan says -1: v1 makes no follow-up call) and
 *       requests_observed = request_count.
 * As AgentOS's reducer does. Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_FETCHING, PC_COMPLETED };

static const char *const PC_NAMES[] = {"Idle", "Fetching", "Completed"};
static const uint8_t CBOR_NULL[] = {0xf6};

typedef struct {
    int pc;
    uint64_t next_request_id, requests_observed;
    cbor_span pending, primary, follow; /* encoded options */
} upgrade_state;

static int read_state(const world_input *in, upgrade_state *s) {
    const cbor_span null = {CBOR_NULL, 1};
    cbor_span v, tag, unit;
    s->pc = PC_IDLE;
    s->next_request_id = s->requests_observed = 0;
    s->pending = s->primary = s->follow = null;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->pc = -1;
    for (int i = 0; i < 3; i++)
        if (world_str_eq(tag, PC_NAMES[i])) s->pc = i;
    if (s->pc < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(in->state, "next_request_id", &s->next_request_id));
    WORLD_TRY(world_rec_uint(in->state, "requests_observed", &s->requests_observed));
    WORLD_TRY(world_rec_field(in->state, "pending_request", &s->pending));
    WORLD_TRY(world_rec_field(in->state, "primary_status", &s->primary));
    return world_rec_field(in->state, "follow_status", &s->follow);
}

/* An event ignored: the state stays as it came in. */
static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

static int upgrade_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1};
    upgrade_state s;
    cbor_span tag, value;
    if (!world_schema_is(&in->event, "demo/SafeUpgradeEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));

    if (world_str_eq(tag, "Start")) {
        cbor_span url;
        WORLD_TRY(world_rec_text(value, "url", &url));
        if (s.pc == PC_FETCHING) return keep(in, out);
        uint64_t request_id = s.next_request_id;
        s.next_request_id += s.next_request_id < UINT64_MAX;
        world_buf pending = {0};
        cbor_put_uint(&pending, request_id);
        s.pending = world_buf_span(&pending);
        s.pc = PC_FETCHING;
        s.primary = s.follow = null;
        s.requests_observed = 0;
        cbor_map intent;
        cbor_map_init(&intent);
        cbor_put_uint(cbor_map_key(&intent, "request_id"), request_id);
        cbor_put_text(cbor_map_key(&intent, "url"), url.ptr, url.len);
        cbor_put_map(world_emit(out, "demo/UpgradeFetchRequest@1"), &intent);
    } else if (world_str_eq(tag, "NotifyComplete")) {
        int64_t primary, follow;
        uint64_t count;
        WORLD_TRY(world_rec_int(value, "primary_status", &primary));
        WORLD_TRY(world_rec_int(value, "follow_status", &follow));
        WORLD_TRY(world_rec_uint(value, "request_count", &count));
        if (cbor_is_null(s.pending)) return keep(in, out);
        s.pending = null;
        s.pc = PC_COMPLETED;
        WORLD_TRY(world_rec_field(value, "primary_status", &s.primary));
        if (follow >= 0) WORLD_TRY(world_rec_field(value, "follow_status", &s.follow));
        s.requests_observed = count;
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[s.pc]);
    cbor_put_uint(cbor_map_key(&rec, "next_request_id"), s.next_request_id);
    cbor_put_raw(cbor_map_key(&rec, "pending_request"), s.pending);
    cbor_put_raw(cbor_map_key(&rec, "primary_status"), s.primary);
    cbor_put_raw(cbor_map_key(&rec, "follow_status"), s.follow);
    cbor_put_uint(cbor_map_key(&rec, "requests_observed"), s.requests_observed);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(upgrade_step)
