/*
 * demo/BlobEchoSM@1 -- AgentOS's ladder rung 02 ("blob-echo"), our reducer for its AIR as
 * shipped (manifests/agentos-02-blob-echo/).
 *
 * One world-wide state (no key_schema), demo/BlobEchoState@1 {pc: Idle|Putting|Getting|Done,
 * pending_blob_ref, stored_blob_ref, retrieved_blob_ref, retrieved_blob_hash: option<text>};
 * a null state is Idle with every option null. Refs are written "blake3:<64 hex>", the name
 * our content store gives a blob.
 *   demo/BlobEchoEvent@1 Start {data}: taken when Idle or Done (otherwise nothing changes):
 *       pc = Putting, the refs cleared, one effect blob.put {data} through cap slot "default".
 *   sys/BlobPutResult@1 (or the PutResult case), while Putting: status "ok" records the
 *       receipt's blob_ref as stored_blob_ref, pc = Getting and one effect blob.get
 *       {blob_ref}; any other status ends at Done.
 *   sys/BlobGetResult@1 (or the GetResult case), while Getting: status "ok" with the stored
 *       ref records retrieved_blob_ref; pc = Done either way.
 * What differs from AgentOS's reducer: it hashes the data itself (sha256) to know the ref
 * before the put; ours has no hash function, so the store names the blob (pending_blob_ref stays
 * null) and the bytes' hash is checked by the blob adapter, which answers a get whose bytes do
 * not hash to the ref with an error receipt: retrieved_blob_hash is the ref the checked get
 * answered with. Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_PUTTING, PC_GETTING, PC_DONE };

static const char *const PC_NAMES[] = {"Idle", "Putting", "Getting", "Done"};
static const uint8_t CBOR_NULL[] = {0xf6};

typedef struct {
    int pc;
    cbor_span pending, stored, retrieved, retrieved_hash; /* encoded option<text> */
} echo_state;

static int read_state(const world_input *in, echo_state *s) {
    const cbor_span null = {CBOR_NULL, 1};
    cbor_span v, tag, unit;
    s->pc = PC_IDLE;
    s->pending = s->stored = s->retrieved = s->retrieved_hash = null;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->pc = -1;
    for (int i = 0; i < 4; i++)
        if (world_str_eq(tag, PC_NAMES[i])) s->pc = i;
    if (s->pc < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_field(in->state, "pending_blob_ref", &s->pending));
    WORLD_TRY(world_rec_field(in->state, "stored_blob_ref", &s->stored));
    WORLD_TRY(world_rec_field(in->state, "retrieved_blob_ref", &s->retrieved));
    return world_rec_field(in->state, "retrieved_blob_hash", &s->retrieved_hash);
}

/* The receipt's 32-byte blob_ref as the encoded text "blake3:<hex>" (71 bytes, one item). */
static int ref_text(cbor_span receipt, cbor_span *out) {
    static const char hex[] = "0123456789abcdef";
    cbor_span v, raw;
    WORLD_TRY(world_rec_field(receipt, "blob_ref", &v));
    WORLD_TRY(cbor_read_bytes(v, &raw));
    if (raw.len != 32) return WORLD_EINVAL;
    world_buf b = {0};
    char text[7 + 64] = "blake3:";
    for (uint32_t i = 0; i < 32; i++) {
        text[7 + 2 * i] = hex[raw.ptr[i] >> 4];
        text[8 + 2 * i] = hex[raw.ptr[i] & 15];
    }
    cbor_put_text(&b, text, sizeof text);
    out->ptr = b.ptr;
    out->len = b.len;
    return WORLD_OK;
}

/* The result record of a receipt event, under its own schema or as the event's variant case. */
static int result_of(const world_event *ev, const char *schema, const char *tag_name,
                     bool *is, cbor_span *result) {
    *is = false;
    if (world_schema_is(ev, schema)) {
        *is = true;
        *result = ev->value;
    } else if (world_schema_is(ev, "demo/BlobEchoEvent@1")) {
        cbor_span tag;
        WORLD_TRY(world_variant_read(ev->value, &tag, result));
        *is = world_str_eq(tag, tag_name);
    }
    return WORLD_OK;
}

static int echo_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1};
    echo_state s;
    bool put = false, got = false;
    cbor_span result, status, receipt;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(result_of(&in->event, "sys/BlobPutResult@1", "PutResult", &put, &result));
    WORLD_TRY(result_of(&in->event, "sys/BlobGetResult@1", "GetResult", &got, &result));

    if (put || got) {
        WORLD_TRY(world_rec_text(result, "status", &status));
        WORLD_TRY(world_rec_field(result, "receipt", &receipt));
    }
    if (put) {
        if (s.pc == PC_PUTTING) {
            if (!world_str_eq(status, "ok")) {
                s.pc = PC_DONE;
            } else {
                cbor_span ref;
                WORLD_TRY(world_rec_field(receipt, "blob_ref", &ref));
                WORLD_TRY(ref_text(receipt, &s.stored));
                s.pc = PC_GETTING;
                cbor_map params;
                cbor_map_init(&params);
                cbor_put_raw(cbor_map_key(&params, "blob_ref"), ref);
                cbor_put_map(world_effect(out, "blob.get", "default"), &params);
            }
        }
    } else if (got) {
        if (s.pc == PC_GETTING) {
            if (world_str_eq(status, "ok")) {
                cbor_span ref;
                WORLD_TRY(ref_text(receipt, &ref));
                s.retrieved_hash = ref;
                if (cbor_span_eq(ref, s.stored)) s.retrieved = ref;
            }
            s.pc = PC_DONE;
        }
    } else if (world_schema_is(&in->event, "demo/BlobEchoEvent@1")) {
        cbor_span tag, value, data, content;
        WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
        if (!world_str_eq(tag, "Start")) return WORLD_EINVAL;
        WORLD_TRY(world_rec_field(value, "data", &data));
        WORLD_TRY(cbor_read_bytes(data, &content)); /* checks the type; the bytes go as they are */
        if (s.pc == PC_IDLE || s.pc == PC_DONE) {
            s.pc = PC_PUTTING;
            s.pending = s.stored = s.retrieved = s.retrieved_hash = null;
            cbor_map params;
            cbor_map_init(&params);
            cbor_put_raw(cbor_map_key(&params, "data"), data);
            cbor_put_map(world_effect(out, "blob.put", "default"), &params);
        }
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[s.pc]);
    cbor_put_raw(cbor_map_key(&rec, "pending_blob_ref"), s.pending);
    cbor_put_raw(cbor_map_key(&rec, "stored_blob_ref"), s.stored);
    cbor_put_raw(cbor_map_key(&rec, "retrieved_blob_ref"), s.retrieved);
    cbor_put_raw(cbor_map_key(&rec, "retrieved_blob_hash"), s.retrieved_hash);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(echo_step)
