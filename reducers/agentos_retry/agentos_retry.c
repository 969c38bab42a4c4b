/*
 * demo/RetrySM@1 -- AgentOS's ladder rung 08 ("retry-backoff"), our reducer for its AIR as
 * shipped (manifests/agentos-08-retry-backoff/): the reducer owns the attempts and the timers,
 * the plan demo/WorkPlan@1 only tries the work and reports back.
 *
 * One world-wide state (no key_schema), demo/RetryState@1 {pc: text (Idle|Waiting|Done|Failed),
 * attempt, max_attempts, base_delay_ms, anchor_ns: nat, payload, req_id: text}; a null state is
 * Idle with zeros and empty texts. Events (demo/RetryEvent@1 cases, or the timer's receipt under
 * its own schema sys/TimerFired@1):
 *   start {req_id, payload, max_attempts, base_delay_ms, now_ns}: pc = Waiting, attempt = 1,
 *       max_attempts and base_delay_ms at least 1, anchor_ns = now_ns; emits
 *       demo/WorkRequested@1 {req_id, payload} (the manifest's trigger starts the plan on it).
 *   err {req_id, transient, message}: only while Waiting and for this req_id. Transient with
 *       attempt < max_attempts: one timer.set {deliver_at_ns, key: req_id} through cap slot
 *       "default", at anchor_ns + base_delay_ms * 2^(attempt-1) ms (saturating), and attempt
 *       += 1; otherwise pc = Failed.
 *   timer (sys/TimerFired@1): while Waiting, emits demo/WorkRequested@1 again (the next try).
 *   ok {req_id}: pc = Done once a start was taken (req_id not empty).
 * Any other event schema or case fails the step.
 */
#include "world.h"

typedef struct {
    cbor_span pc; /* text content */
    uint64_t attempt, max_attempts, base_delay_ms, anchor_ns;
    cbor_span payload, req_id; /* text contents */
} retry_state;

static const char EMPTY[1] = "";

static int read_state(const world_input *in, retry_state *s) {
    s->pc = (cbor_span){(const uint8_t *)"Idle", 4};
    s->attempt = s->max_attempts = s->base_delay_ms = s->anchor_ns = 0;
    s->payload = s->req_id = (cbor_span){(const uint8_t *)EMPTY, 0};
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_text(in->state, "pc", &s->pc));
    WORLD_TRY(world_rec_uint(in->state, "attempt", &s->attempt));
    WORLD_TRY(world_rec_uint(in->state, "max_attempts", &s->max_attempts));
    WORLD_TRY(world_rec_uint(in->state, "base_delay_ms", &s->base_delay_ms));
    WORLD_TRY(world_rec_uint(in->state, "anchor_ns", &s->anchor_ns));
    WORLD_TRY(world_rec_text(in->state, "payload", &s->payload));
    return world_rec_text(in->state, "req_id", &s->req_id);
}

static void set_pc(retry_state *s, const char *pc) {
    s->pc = (cbor_span){(const uint8_t *)pc, world_strlen(pc)};
}

static void request_work(const retry_state *s, world_out *out) {
    cbor_map ev;
    cbor_map_init(&ev);
    cbor_put_text(cbor_map_key(&ev, "req_id"), s->req_id.ptr, s->req_id.len);
    cbor_put_text(cbor_map_key(&ev, "payload"), s->payload.ptr, s->payload.len);
    cbor_put_map(world_emit(out, "demo/WorkRequested@1"), &ev);
}

/* base_ms * 2^shift * 1e6, saturating. (A 64-bit multiply-overflow check, written any way
   clang recognises, needs compiler-rt's __multi3, which we do not link: shifts and a constant
   bound instead.) */
static uint64_t backoff_ns(uint64_t base_ms, uint64_t shift) {
    if (shift >= 64 || base_ms > (UINT64_MAX >> shift)) return UINT64_MAX;
    uint64_t ms = base_ms << shift;
    return ms > UINT64_MAX / 1000000u ? UINT64_MAX : ms * 1000000u;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static void schedule_retry(const retry_state *s, world_out *out) {
    uint64_t delay_ns = backoff_ns(s->base_delay_ms, s->attempt > 0 ? s->attempt - 1 : 0);
    cbor_map params;
    cbor_map_init(&params);
    cbor_put_uint(cbor_map_key(&params, "deliver_at_ns"), sat_add(s->anchor_ns, delay_ns));
    cbor_put_text(cbor_map_key(&params, "key"), s->req_id.ptr, s->req_id.len);
    cbor_put_map(world_effect(out, "timer.set", "default"), &params);
}

static int retry_step(const world_input *in, world_out *out) {
    retry_state s;
    cbor_span tag, value;
    WORLD_TRY(read_state(in, &s));
    bool waiting = world_str_eq(s.pc, "Waiting");

    if (world_schema_is(&in->event, "sys/TimerFired@1")) {
        tag = (cbor_span){(const uint8_t *)"timer", 5};
        value = in->event.value;
    } else if (world_schema_is(&in->event, "demo/RetryEvent@1")) {
        WORLD_TRY(world_variant_read(in->event.value, &tag, &value));
    } else {
        return WORLD_EINVAL;
    }

    if (world_str_eq(tag, "start")) {
        uint64_t n;
        WORLD_TRY(world_rec_text(value, "req_id", &s.req_id));
        WORLD_TRY(world_rec_text(value, "payload", &s.payload));
        WORLD_TRY(world_rec_uint(value, "max_attempts", &n));
        s.max_attempts = n ? n : 1;
        WORLD_TRY(world_rec_uint(value, "base_delay_ms", &n));
        s.base_delay_ms = n ? n : 1;
        WORLD_TRY(world_rec_uint(value, "now_ns", &s.anchor_ns));
        s.attempt = 1;
        set_pc(&s, "Waiting");
        request_work(&s, out);
    } else if (world_str_eq(tag, "err")) {
        cbor_span req_id;
        bool transient;
        WORLD_TRY(world_rec_text(value, "req_id", &req_id));
        WORLD_TRY(world_rec_bool(value, "transient", &transient));
        if (waiting && cbor_span_eq(req_id, s.req_id)) {
            if (transient && s.attempt < s.max_attempts) {
                schedule_retry(&s, out);
                s.attempt += 1;
            } else {
                set_pc(&s, "Failed");
            }
        }
    } else if (world_str_eq(tag, "timer")) {
        cbor_span status;
        WORLD_TRY(world_rec_text(value, "status", &status)); /* the shape is a receipt's */
        if (waiting) request_work(&s, out);
    } else if (world_str_eq(tag, "ok")) {
        cbor_span req_id;
        WORLD_TRY(world_rec_text(value, "req_id", &req_id));
        if (s.req_id.len > 0) set_pc(&s, "Done");
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_text(cbor_map_key(&rec, "pc"), s.pc.ptr, s.pc.len);
    cbor_put_uint(cbor_map_key(&rec, "attempt"), s.attempt);
    cbor_put_uint(cbor_map_key(&rec, "max_attempts"), s.max_attempts);
    cbor_put_uint(cbor_map_key(&rec, "base_delay_ms"), s.base_delay_ms);
    cbor_put_uint(cbor_map_key(&rec, "anchor_ns"), s.anchor_ns);
    cbor_put_text(cbor_map_key(&rec, "payload"), s.payload.ptr, s.payload.len);
    cbor_put_text(cbor_map_key(&rec, "req_id"), s.req_id.ptr, s.req_id.len);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(retry_step)
