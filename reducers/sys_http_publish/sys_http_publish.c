/*
 * sys/HttpPublish@1 -- the built-in HTTP publish registry reducer (air.sys.workspace), as
 * AgentOS's crates/aos-sys/src/bin/http_publish.rs: which workspace paths are published under
 * which HTTP route prefix.
 *
 * One world-wide state (no key), sys/HttpPublishRegistry@1 {rules: map<text,
 * sys/HttpPublishRule@1>}; a null state is {rules: {}}. Event sys/HttpPublishSet@1 {id, rule:
 * option<rule>}: a rule sets rules[id] (replacing one there), null removes it (nothing to
 * remove changes nothing). An id of no character is refused (the step fails).
 */
#include "world.h"

static int publish_step(const world_input *in, world_out *out) {
    cbor_span id, id_item, rule, rules;
    if (!world_schema_is(&in->event, "sys/HttpPublishSet@1")) return WORLD_EINVAL;
    WORLD_TRY(world_rec_text(in->event.value, "id", &id));
    WORLD_TRY(world_rec_field(in->event.value, "id", &id_item));
    WORLD_TRY(world_rec_field(in->event.value, "rule", &rule));
    if (id.len == 0) return world_refuse(out, "a rule id is not empty");

    cbor_map entries;
    cbor_map_init(&entries);
    if (in->has_state) {
        cbor_iter it;
        cbor_span k, v;
        int rc;
        WORLD_TRY(world_rec_field(in->state, "rules", &rules));
        WORLD_TRY(cbor_map_begin(rules, &it));
        while ((rc = cbor_next_entry(&it, &k, &v)) > 0)
            if (!cbor_span_eq(k, id_item)) cbor_put_raw(cbor_map_key_raw(&entries, k), v);
        WORLD_TRY(rc);
    }
    if (!cbor_is_null(rule)) cbor_put_raw(cbor_map_key_raw(&entries, id_item), rule);

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_map(cbor_map_key(&rec, "rules"), &entries);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(publish_step)
