/*
 * sys/Workspace@1 -- the built-in workspace reducer (air.sys.workspace), as AgentOS's
 * crates/aos-sys/src/bin/workspace.rs: one cell per workspace (key sys/WorkspaceName@1, text),
 * its append-only commit history.
 *
 * State sys/WorkspaceHistory@1 {latest: nat, versions: map<nat, sys/WorkspaceCommitMeta@1>};
 * a null state is {latest: 0, versions: {}}. Event sys/WorkspaceCommit@1 {workspace,
 * expected_head: option<nat>, meta: {root_hash, owner, created_at}}: refused (the step fails,
 * the state stays) when the workspace name is not 1+ of [A-Za-z0-9._~-], when it is not the
 * cell's key, or when expected_head is given and is not latest; otherwise latest + 1 is the new
 * version, versions[latest + 1] = meta. A version number is never reused.
 */
#include "world.h"

static bool name_ok(cbor_span name) {
    if (name.len == 0) return false;
    for (uint32_t i = 0; i < name.len; i++) {
        uint8_t c = name.ptr[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '~' || c == '-';
        if (!ok) return false;
    }
    return true;
}

static int workspace_step(const world_input *in, world_out *out) {
    cbor_span name, name_item, expected, meta, versions;
    uint64_t latest = 0, head;
    bool has_head;
    if (!world_schema_is(&in->event, "sys/WorkspaceCommit@1")) return WORLD_EINVAL;
    WORLD_TRY(world_rec_text(in->event.value, "workspace", &name));
    WORLD_TRY(world_rec_field(in->event.value, "workspace", &name_item));
    WORLD_TRY(world_rec_field(in->event.value, "expected_head", &expected));
    WORLD_TRY(world_rec_field(in->event.value, "meta", &meta));
    if (!name_ok(name)) return world_refuse(out, "invalid workspace name");
    if (in->has_key && !cbor_span_eq(in->key, name_item)) return world_refuse(out, "key mismatch");
    if (in->has_state) {
        WORLD_TRY(world_rec_uint(in->state, "latest", &latest));
        WORLD_TRY(world_rec_field(in->state, "versions", &versions));
    }
    WORLD_TRY(cbor_read_opt_uint(expected, &has_head, &head));
    if (has_head && head != latest) return world_refuse(out, "workspace head mismatch");
    if (latest == UINT64_MAX) return world_refuse(out, "no version left");

    cbor_map entries;
    cbor_map_init(&entries);
    if (in->has_state) {
        cbor_iter it;
        cbor_span k, v;
        int rc;
        WORLD_TRY(cbor_map_begin(versions, &it));
        while ((rc = cbor_next_entry(&it, &k, &v)) > 0) cbor_put_raw(cbor_map_key_raw(&entries, k), v);
        WORLD_TRY(rc);
    }
    world_buf next = {0};
    cbor_put_uint(&next, latest + 1);
    cbor_put_raw(cbor_map_key_raw(&entries, world_buf_span(&next)), meta);

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "latest"), latest + 1);
    cbor_put_map(cbor_map_key(&rec, "versions"), &entries);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(workspace_step)
