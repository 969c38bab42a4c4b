/*
 * demo/LlmSummarizer@1 -- AgentOS's ladder rung 07 ("llm-summarizer"), our reducer for its AIR
 * (manifests/agentos-07-llm-summarizer/).
 *
 * One world-wide state (no key_schema), demo/LlmSummarizerState@1 {pc: Idle|Summarizing|Done,
 * next_request_id: nat, pending_request: option<nat>, last_summary: option<text>,
 * last_tokens_prompt, last_tokens_completion, last_cost_millis: option<nat>}; a null state is
 * Idle, next_request_id 0, every option null.
 *   demo/LlmSummarizerEvent@1 Start {url}: ignored while Summarizing; otherwise the request
 *       takes next_request_id (which counts on), pending_request = it, pc = Summarizing, the
 *       last results cleared, and the reducer emits the domain intent demo/SummarizeRequest@1
 *       {request_id, url}: the trigger starts demo/summarize_plan@1 (fetch, then llm.generate).
 *   SummaryReady {request_id, summary, tokens_prompt, tokens_completion, cost_millis}:
 *       ignored unless request_id is the pending one; otherwise pending_request = null,
 *       pc = Done and the four results kept.
 * As AgentOS's reducer does. Any other event schema or case fails the step.
 */
#include "world.h"

enum { PC_IDLE, PC_SUMMARIZING, PC_DONE };

static const char *const PC_NAMES[] = {"Idle", "Summarizing", "Done"};
static const char *const RESULTS[] = {"summary", "tokens_prompt", "tokens_completion",
                                      "cost_millis"};
static const char *const KEPT[] = {"last_summary", "last_tokens_prompt",
                                   "last_tokens_completion", "last_cost_millis"};
static const uint8_t CBOR_NULL[] = {0xf6};

typedef struct {
    int pc;
    uint64_t next_request_id;
    cbor_span pending, kept[4]; /* encoded options */
} summarizer_state;

static int read_state(const world_input *in, summarizer_state *s) {
    const cbor_span null = {CBOR_NULL, 1};
    cbor_span v, tag, unit;
    s->pc = PC_IDLE;
    s->next_request_id = 0;
    s->pending = null;
    for (int i = 0; i < 4; i++) s->kept[i] = null;
    if (!in->has_state) return WORLD_OK;
    WORLD_TRY(world_rec_field(in->state, "pc", &v));
    WORLD_TRY(world_variant_read(v, &tag, &unit));
    s->pc = -1;
    for (int i = 0; i < 3; i++)
        if (world_str_eq(tag, PC_NAMES[i])) s->pc = i;
    if (s->pc < 0) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(in->state, "next_request_id", &s->next_request_id));
    WORLD_TRY(world_rec_field(in->state, "pending_request", &s->pending));
    for (int i = 0; i < 4; i++) WORLD_TRY(world_rec_field(in->state, KEPT[i], &s->kept[i]));
    return WORLD_OK;
}

/* An event ignored: the state stays as it came in. */
static int keep(const world_input *in, world_out *out) {
    world_keep_state(out, in->has_state ? &in->state : NULL);
    return WORLD_OK;
}

static int summarizer_step(const world_input *in, world_out *out) {
    const cbor_span null = {CBOR_NULL, 1};
    summarizer_state s;
    cbor_span tag, value;
    if (!world_schema_is(&in->event, "demo/LlmSummarizerEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(read_state(in, &s));
    WORLD_TRY(world_variant_read(in->event.value, &tag, &value));

    if (world_str_eq(tag, "Start")) {
        cbor_span url;
        WORLD_TRY(world_rec_text(value, "url", &url));
        if (s.pc == PC_SUMMARIZING) return keep(in, out);
        uint64_t request_id = s.next_request_id;
        s.next_request_id += s.next_request_id < UINT64_MAX;
        world_buf pending = {0};
        cbor_put_uint(&pending, request_id);
        s.pending = world_buf_span(&pending);
        s.pc = PC_SUMMARIZING;
        for (int i = 0; i < 4; i++) s.kept[i] = null;
        cbor_map intent;
        cbor_map_init(&intent);
        cbor_put_uint(cbor_map_key(&intent, "request_id"), request_id);
        cbor_put_text(cbor_map_key(&intent, "url"), url.ptr, url.len);
        cbor_put_map(world_emit(out, "demo/SummarizeRequest@1"), &intent);
    } else if (world_str_eq(tag, "SummaryReady")) {
        uint64_t request_id, pending_id, n;
        bool pending;
        cbor_span text, results[4];
        WORLD_TRY(world_rec_uint(value, "request_id", &request_id));
        WORLD_TRY(world_rec_text(value, "summary", &text));
        for (int i = 1; i < 4; i++) WORLD_TRY(world_rec_uint(value, RESULTS[i], &n));
        for (int i = 0; i < 4; i++) WORLD_TRY(world_rec_field(value, RESULTS[i], &results[i]));
        WORLD_TRY(cbor_read_opt_uint(s.pending, &pending, &pending_id));
        if (!pending || pending_id != request_id) return keep(in, out);
        s.pending = null;
        s.pc = PC_DONE;
        for (int i = 0; i < 4; i++) s.kept[i] = results[i];
    } else {
        return WORLD_EINVAL;
    }

    cbor_map rec;
    cbor_map_init(&rec);
    world_put_unit_variant(cbor_map_key(&rec, "pc"), PC_NAMES[s.pc]);
    cbor_put_uint(cbor_map_key(&rec, "next_request_id"), s.next_request_id);
    cbor_put_raw(cbor_map_key(&rec, "pending_request"), s.pending);
    for (int i = 0; i < 4; i++) cbor_put_raw(cbor_map_key(&rec, KEPT[i]), s.kept[i]);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_REDUCER(summarizer_step)
