/*
 * demo/ChainComp@1 -- AgentOS's ladder rung 05 ("chain-comp", a saga with compensation), our
 * reducer for its AIR as shipped (manifests/agentos-05-chain-comp/).
 *
 * One world-wide state (no key_schema), demo/ChainState@1 {phase: Idle|Charging|Reserving|
 * Notifying|Refunding|Completed|Refunded, next_request_id: nat, current_saga:
 * option<ChainSagaState>}; a null state is Idle, next_request_id 0, no saga. Each step of the
 * saga is a domain intent that the manifest's triggers turn into a plan run, whose result the
 * plan raises back as a demo/ChainEvent@1 case:
 *   Start {order_id, customer_id, amount_cents, reserve_sku, charge, reserve, notify, refund}
 *       (the four {name, method, url} targets): taken when Idle, Completed or Refunded; the
 *       saga takes next_request_id (which counts on), phase = Charging, and the reducer emits
 *       demo/ChargeRequested@1 {request_id, order_id, amount_cents, customer_id, target}.
 *   ChargeCompleted {request_id, status, body_preview}, while Charging: charge_status, phase =
 *       Reserving, emits demo/ReserveRequested@1 {request_id, order_id, sku, target}.
 *   ReserveCompleted (the reserve plan raises it for a status below 400), while Reserving:
 *       reserve_status, phase = Notifying, emits demo/NotifyRequested@1 {request_id, order_id,
 *       status_text: "reserved: " + body_preview, target}.
 *   ReserveFailed (status 400 or more), while Reserving: reserve_status, last_error =
 *       body_preview, phase = Refunding, emits demo/RefundRequested@1 {request_id, order_id,
 *       amount_cents, target}: the compensation of the charge.
 *   NotifyCompleted {request_id, status}, while Notifying: notify_status, phase = Completed.
 *   RefundCompleted {request_id, status}, while Refunding: refund_status, phase = Refunded.
 * A result for another request_id, or with no saga, is ignored, as AgentOS's reducer does. Where
 * ours differs: a result is taken only in the phase that waits for it (AgentOS's takes it in
 * any phase, so a second ChargeCompleted would reserve twice); a stale or repeated one leaves
 * the state as it is. Like AgentOS's, a charge is not judged by its status: the example's
 * schema has no phase for a failed charge. Any other event schema or case fails the step.
 */
#include "world.h"

enum { IDLE, CHARGING, RESERVING, NOTIFYING, REFUNDING, COMPLETED, REFUNDED, PHASES };

static const char *const PHASE_NAMES[PHASES] = {"Idle",      "Charging",  "Reserving", "Notifying",
                                                "Refunding", "Completed", "Refunded"};

enum {
    REQUEST_ID, ORDER_ID, CUSTOMER_ID, AMOUNT_CENTS, RESERVE_SKU, CHARGE_STATUS, RESERVE_STATUS,
    NOTIFY_STATUS, REFUND_STATUS, LAST_ERROR, CHARGE_TARGET, RESERVE_TARGET, NOTIFY_TARGET,
    REFUND_TARGET, SAGA_FIELDS
};

static const char *const SAGA_NAMES[SAGA_FIELDS] = {
    "request_id",     "order_id",      "customer_id",   "amount_cents",  "reserve_sku",
    "charge_status",  "reserve_status", "notify_status", "refund_status", "last_error",
    "charge_target",  "reserve_target", "notify_target", "refund_target"};

static const uint8_t CBOR_NULL[] = {0xf6};

typedef struct {
    int phase;
    uint64_t next_request_id;
    bool has_saga;
    cbor_span saga[SAGA_FIELDS]; /* each field encoded, as the schema has it */
} chain_state;

static int read_state(const world_input *in, chain_state *s) {
    cbor_span v, tag, unit;
    s->phase = IDLE;
    s->next_request_id = 0;
    s->has_saga = false;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "phase", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->phase = -1;
    for (int i = 0; i < PHASES; i++)
        if (world_str_eq(tag, PHASE_NAMES[i])) s->phase = i;
    if (s->phase < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(in->state, "next_request_id", &s->next_request_id));
    WORLD_TRY(world_rec_field(in->state, "current_saga", &v));
    s->has_saga = !cbor_is_null(v);
    for (int i = 0; s->has_saga && i < SAGA_FIELDS; i++)
        WORLD_TRY(world_rec_field(v, SAGA_NAMES[i], &s->saga[i]));
    return WORLD_OK;
}

static void write_state(const chain_state *s, world_out *out) {
    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "phase"), PHASE_NAMES[s->phase]);
    cbor_put_uint(cbor_map_key(&rec, "next_request_id"), s->next_request_id);
    if (!s->has_saga) {
        cbor_put_null(cbor_map_key(&rec, "current_saga"));
    } else {
        cbor_map saga;
        cbor_map_init(&saga);
        for (int i = 0; i < SAGA_FIELDS; i++)
            cbor_put_raw(cbor_map_key(&saga, SAGA_NAMES[i]), s->saga[i]);
        cbor_put_map(cbor_map_key(&rec, "current_saga"), &saga);
    }
    cbor_put_map(world_set_state(out), &rec);
}

/* An event ignored: the state stays as it came in. */
static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

/* Emits `schema` {request_id, order_id, target: saga[target], `name`: `value`, and `name2`:
   `value2` when `name2` is not NULL}. */
static void request(world_out *out, const chain_state *s, const char *schema, int target,
                    const char *name, cbor_span value, const char *name2, cbor_span value2) {
    cbor_map intent;
    cbor_map_init(&intent);
    cbor_put_raw(cbor_map_key(&intent, "request_id"), s->saga[REQUEST_ID]);
    cbor_put_raw(cbor_map_key(&intent, "order_id"), s->saga[ORDER_ID]);
    cbor_put_raw(cbor_map_key(&intent, "target"), s->saga[target]);
    cbor_put_raw(cbor_map_key(&intent, name), value);
    if (name2) cbor_put_raw(cbor_map_key(&intent, name2), value2);
    cbor_put_map(world_emit(out, schema), &intent);
}

static cbor_span encoded_text(const char *prefix, cbor_span text) {
    uint32_t n = world_strlen(prefix);
    world_buf b = {0};
    cbor_put_head(&b, CBOR_TEXT, (uint64_t)n + text.len);
    world_buf_append(&b, prefix, n);
    world_buf_append(&b, text.ptr, text.len);
    return world_buf_span(&b);
}

static int start(const world_input *in, world_out *out, chain_state *s, cbor_span value) {
    static const char *const FROM[] = {"order_id", "customer_id", "amount_cents", "reserve_sku",
                                       "charge",   "reserve",     "notify",       "refund"};
    static const int TO[] = {ORDER_ID,      CUSTOMER_ID,    AMOUNT_CENTS,  RESERVE_SKU,
                             CHARGE_TARGET, RESERVE_TARGET, NOTIFY_TARGET, REFUND_TARGET};
    const cbor_span null = {CBOR_NULL, 1};
    cbor_span given[8];
    for (int i = 0; i < 8; i++) WORLD_TRY(world_rec_field(value, FROM[i], &given[i]));
    if (s->phase != IDLE && s->phase != COMPLETED && s->phase != REFUNDED) return keep(in, out);
    world_buf id = {0};
    cbor_put_uint(&id, s->next_request_id);
    s->next_request_id += s->next_request_id < UINT64_MAX;
    s->has_saga = true;
    for (int i = 0; i < SAGA_FIELDS; i++) s->saga[i] = null;
    s->saga[REQUEST_ID] = world_buf_span(&id);
    for (int i = 0; i < 8; i++) s->saga[TO[i]] = given[i];
    s->phase = CHARGING;
    request(out, s, "demo/ChargeRequested@1", CHARGE_TARGET, "amount_cents", s->saga[AMOUNT_CENTS],
            "customer_id", s->saga[CUSTOMER_ID]);
    write_state(s, out);
    return WORLD_OK;
}

static int chain_step(const world_input *in, world_out *out) {
    chain_state s;
    cbor_span tag, value, status, preview = {0};
    uint64_t request_id, current;
    if (!world_schema_is(&in->event, "demo/ChainEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
    if (world_str_eq(tag, "Start")) return start(in, out, &s, value);

    static const char *const RESULTS[] = {"ChargeCompleted", "ReserveCompleted", "ReserveFailed",
                                          "NotifyCompleted", "RefundCompleted"};
    static const int WAITING[] = {CHARGING, RESERVING, RESERVING, NOTIFYING, REFUNDING};
    int result = -1;
    for (int i = 0; i < 5; i++)
        if (world_str_eq(tag, RESULTS[i])) result = i;
    if (result < 0) return WORLD_EINVAL;
    int64_t code;
    WORLD_TRY(world_rec_uint(value, "request_id", &request_id));
    WORLD_TRY(world_rec_int(value, "status", &code));
    WORLD_TRY(world_rec_field(value, "status", &status));
    if (result <= 2) {
        WORLD_TRY(world_rec_text(value, "body_preview", &preview));
    }
    if (!s.has_saga || s.phase != WAITING[result]) return keep(in, out);
    WORLD_TRY(cbor_read_uint(s.saga[REQUEST_ID], &current));
    if (current != request_id) return keep(in, out);

    const cbor_span null = {CBOR_NULL, 1};
    if (result == 0) { /* ChargeCompleted */
        s.saga[CHARGE_STATUS] = status;
        s.saga[LAST_ERROR] = null;
        s.phase = RESERVING;
        request(out, &s, "demo/ReserveRequested@1", RESERVE_TARGET, "sku", s.saga[RESERVE_SKU],
                NULL, null);
    } else if (result == 1) { /* ReserveCompleted */
        s.saga[RESERVE_STATUS] = status;
        s.saga[LAST_ERROR] = null;
        s.phase = NOTIFYING;
        request(out, &s, "demo/NotifyRequested@1", NOTIFY_TARGET, "status_text",
                encoded_text("reserved: ", preview), NULL, null);
    } else if (result == 2) { /* ReserveFailed */
        s.saga[RESERVE_STATUS] = status;
        world_buf error = {0};
        cbor_put_text(&error, preview.ptr, preview.len);
        s.saga[LAST_ERROR] = world_buf_span(&error);
        s.phase = REFUNDING;
        request(out, &s, "demo/RefundRequested@1", REFUND_TARGET, "amount_cents",
                s.saga[AMOUNT_CENTS], NULL, null);
    } else if (result == 3) { /* NotifyCompleted */
        s.saga[NOTIFY_STATUS] = status;
        s.phase = COMPLETED;
    } else { /* RefundCompleted */
        s.saga[REFUND_STATUS] = status;
        s.phase = REFUNDED;
    }
    write_state(&s, out);
    return WORLD_OK;
}

WORLD_REDUCER(chain_step)
