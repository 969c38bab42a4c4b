/*
 * demo/Account@1 -- a keyed balance that refuses an overdraft, written with the SDK wrapper.
 *
 * Event demo/AccountEvent@1 = {key: text, op: variant {Deposit: nat, Withdraw: nat}}
 * State demo/AccountState@1 = {balance: nat}
 *
 * Deposit(n) adds n; Withdraw(n) takes n when the balance covers it. When it does not, the
 * reducer refuses the event with a reason (world_refuse): "overdraft: balance 5, asked 9". The
 * state stays as it was, and the event becomes a dead letter that an operator can retry once
 * the account holds enough (`world dead-letters retry`) or drop. A first Withdraw on an
 * account that never had a deposit is refused the same way (balance 0). A balance that would
 * overflow fails the step.
 */
#include "world.h"

static int account_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "key", key);
}

static int account_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                        world_out *out) {
    cbor_span op, tag, arg;
    uint64_t amount, balance = 0;
    (void)key;
    if (!world_schema_is(ev, "demo/AccountEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(world_event_field(ev, "op", &op));
    WORLD_TRY(world_variant_read(op, &tag, &arg));
    WORLD_TRY(cbor_read_uint(arg, &amount));
    if (state) WORLD_TRY(world_rec_uint(*state, "balance", &balance));
    if (world_str_eq(tag, "Deposit")) {
        if (__builtin_add_overflow(balance, amount, &balance)) return WORLD_ERANGE;
    } else if (world_str_eq(tag, "Withdraw")) {
        if (amount > balance) {
            world_buf *why = world_refusal(out);
            world_text(why, "overdraft: balance ");
            world_text_uint(why, balance);
            world_text(why, ", asked ");
            world_text_uint(why, amount);
            return WORLD_OK;
        }
        balance -= amount;
    } else {
        return WORLD_EINVAL;
    }
    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_uint(cbor_map_key(&rec, "balance"), balance);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

WORLD_CELL_REDUCER(account_step, account_key)
