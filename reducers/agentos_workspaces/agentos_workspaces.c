/*
 * demo/WorkspaceDemo@1 -- AgentOS's ladder rung 09 ("workspaces"), our reducer for its AIR as
 * shipped (manifests/agentos-09-workspaces/).
 *
 * One world-wide state (no key_schema), demo/WorkspaceState@1 {workspaces: map<text,
 * demo/WorkspaceSummary@1 {version: option<nat>, root_hash: hash, entry_count: nat,
 * diff_count: nat}>}; a null state is {workspaces: {}}.
 *   demo/WorkspaceEvent@1 Start {workspaces, owner}: one domain intent demo/WorkspaceSeed@1
 *       {workspace, owner} per workspace named (the trigger runs the seed plan for each); the
 *       state does not change.
 *   Seeded {workspace, expected_head, root_hash, entry_count, diff_count, owner} (the plan
 *       raises it): a summary the same as the one kept (root, entries, diffs) changes nothing
 *       (a replayed seed is idempotent); otherwise the summary is kept, its version
 *       expected_head + 1 (or the kept version + 1, or 1), and the reducer emits
 *       sys/WorkspaceCommit@1 {workspace, expected_head, meta {root_hash, owner, created_at}},
 *       routed to sys/Workspace@1's cell of that workspace: the new root becomes its head.
 *       created_at is 0: a reducer here has no clock (AgentOS's takes ctx.now_ns, else 0).
 * As AgentOS's reducer does. Any other event schema or case fails the step.
 */
#include "world.h"

static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

static int start(const world_input *in, world_out *out, cbor_span value) {
    cbor_span names, owner, name;
    cbor_iter it;
    int rc;
    WORLD_TRY(world_rec_field(value, "workspaces", &names));
    WORLD_TRY(world_rec_field(value, "owner", &owner));
    WORLD_TRY(cbor_array_begin(names, &it));
    while ((rc = cbor_next(&it, &name)) > 0) {
        cbor_map seed;
        cbor_map_init(&seed);
        cbor_put_raw(cbor_map_key(&seed, "workspace"), name);
        cbor_put_raw(cbor_map_key(&seed, "owner"), owner);
        cbor_put_map(world_emit(out, "demo/WorkspaceSeed@1"), &seed);
    }
    WORLD_TRY(rc);
    return keep(in, out);
}

static int seeded(const world_input *in, world_out *out, cbor_span value) {
    static const uint8_t EMPTY_MAP[] = {0xa0};
    const cbor_span empty = {EMPTY_MAP, 1};
    cbor_span name, expected, root, entries, diffs, owner, kept = empty, old;
    uint64_t n, head, version = 1;
    bool has_head, has_old = false;
    WORLD_TRY(world_rec_text(value, "workspace", &name));
    WORLD_TRY(world_rec_field(value, "workspace", &name));
    WORLD_TRY(world_rec_field(value, "expected_head", &expected));
    WORLD_TRY(world_rec_field(value, "root_hash", &root));
    WORLD_TRY(world_rec_uint(value, "entry_count", &n));
    WORLD_TRY(world_rec_field(value, "entry_count", &entries));
    WORLD_TRY(world_rec_uint(value, "diff_count", &n));
    WORLD_TRY(world_rec_field(value, "diff_count", &diffs));
    WORLD_TRY(world_rec_field(value, "owner", &owner));
    WORLD_TRY(cbor_read_opt_uint(expected, &has_head, &head));
    if (in->has_state) WORLD_TRY(world_rec_field(in->state, "workspaces", &kept));
    has_old = cbor_map_get_raw(kept, name, &old) == WORLD_OK;
    if (has_old) {
        cbor_span r, e, d, v;
        WORLD_TRY(world_rec_field(old, "root_hash", &r));
        WORLD_TRY(world_rec_field(old, "entry_count", &e));
        WORLD_TRY(world_rec_field(old, "diff_count", &d));
        if (cbor_span_eq(r, root) && cbor_span_eq(e, entries) && cbor_span_eq(d, diffs))
            return keep(in, out);
        WORLD_TRY(world_rec_field(old, "version", &v));
        bool present;
        uint64_t was;
        WORLD_TRY(cbor_read_opt_uint(v, &present, &was));
        if (present) version = was == UINT64_MAX ? was : was + 1;
    }
    if (has_head) version = head == UINT64_MAX ? head : head + 1;

    cbor_map all;
    cbor_map_init(&all);
    cbor_iter it;
    cbor_span k, v;
    int rc;
    WORLD_TRY(cbor_map_begin(kept, &it));
    while ((rc = cbor_next_entry(&it, &k, &v)) > 0)
        if (!cbor_span_eq(k, name)) cbor_put_raw(cbor_map_key_raw(&all, k), v);
    WORLD_TRY(rc);
    cbor_map summary;
    cbor_map_init(&summary);
    cbor_put_uint(cbor_map_key(&summary, "version"), version);
    cbor_put_raw(cbor_map_key(&summary, "root_hash"), root);
    cbor_put_raw(cbor_map_key(&summary, "entry_count"), entries);
    cbor_put_raw(cbor_map_key(&summary, "diff_count"), diffs);
    cbor_put_map(cbor_map_key_raw(&all, name), &summary);
    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_map(cbor_map_key(&rec, "workspaces"), &all);
    cbor_put_map(world_set_state(out), &rec);

    cbor_map meta;
    cbor_map_init(&meta);
    cbor_put_raw(cbor_map_key(&meta, "root_hash"), root);
    cbor_put_raw(cbor_map_key(&meta, "owner"), owner);
    cbor_put_uint(cbor_map_key(&meta, "created_at"), 0);
    cbor_map commit;
    cbor_map_init(&commit);
    cbor_put_raw(cbor_map_key(&commit, "workspace"), name);
    cbor_put_raw(cbor_map_key(&commit, "expected_head"), expected);
    cbor_put_map(cbor_map_key(&commit, "meta"), &meta);
    cbor_put_map(world_emit(out, "sys/WorkspaceCommit@1"), &commit);
    return WORLD_OK;
}

static int demo_step(const world_input *in, world_out *out) {
    cbor_span tag, value;
    if (!world_schema_is(&in->event, "demo/WorkspaceEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
    if (world_str_eq(tag, "Start")) return start(in, out, value);
    if (world_str_eq(tag, "Seeded")) return seeded(in, out, value);
    return WORLD_EINVAL;
}

WORLD_REDUCER(demo_step)
