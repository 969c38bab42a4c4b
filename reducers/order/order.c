/*
 * demo/Order@1 -- a keyed order that asks for a fetch and records its outcome.
 *
 * Events: demo/OrderPlaced@1 = {order_id: text, url: text}
 *         demo/FetchDone@1   = {order_id: text, status: int}
 * State   demo/OrderState@1  = {status: variant {Pending: unit, Fetched: int, Failed: int},
 *                               url: text}
 * Emits   demo/FetchRequested@1 = {order_id: text, url: text} on OrderPlaced.
 *
 * OrderPlaced stores Pending (a repeated OrderPlaced starts over) and emits FetchRequested,
 * which a plan turns into the http.request. FetchDone stores Fetched(status) for 2xx, else
 * Failed(status). FetchDone for an order that was never placed fails the step: silently
 * creating or dropping it would hide a routing bug.
 */
#include "world.h"

static int order_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "order_id", key);
}

static void order_write(world_out *out, const char *status_tag, const int64_t *code,
                        cbor_span url_item) {
    cbor_map rec;
    cbor_map_init(&rec);
    world_buf *status = world_put_variant(cbor_map_key(&rec, "status"), status_tag);
    if (code) cbor_put_int(status, *code);
    else cbor_put_null(status);
    cbor_put_raw(cbor_map_key(&rec, "url"), url_item);
    cbor_put_map(world_set_state(out), &rec);
}

static int order_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                      world_out *out) {
    cbor_span url, order_id, text;
    int64_t code;
    (void)key;
    if (world_schema_is(ev, "demo/OrderPlaced@1")) {
        WORLD_TRY(world_event_field(ev, "order_id", &order_id));
        WORLD_TRY(world_event_field(ev, "url", &url));
        WORLD_TRY(cbor_read_text(url, &text));
        order_write(out, "Pending", NULL, url);
        cbor_map req;
        cbor_map_init(&req);
        cbor_put_raw(cbor_map_key(&req, "order_id"), order_id);
        cbor_put_raw(cbor_map_key(&req, "url"), url);
        cbor_put_map(world_emit(out, "demo/FetchRequested@1"), &req);
        return WORLD_OK;
    }
    if (world_schema_is(ev, "demo/FetchDone@1")) {
        if (!state) return WORLD_EINVAL;
        WORLD_TRY(world_rec_int(ev->value, "status", &code));
        WORLD_TRY(world_rec_field(*state, "url", &url));
        order_write(out, code >= 200 && code <= 299 ? "Fetched" : "Failed", &code, url);
        return WORLD_OK;
    }
    return WORLD_EINVAL;
}

WORLD_CELL_REDUCER(order_step, order_key)
