/*
 * demo/Account@2 -- demo/Account@1 (account/) with a credit line: a balance may go down to
 * -ACCOUNT_V2_CREDIT, so a withdrawal the first version refused as an overdraft goes through
 * once the world is upgraded and the refused event is retried (`world dead-letters retry`).
 *
 * Event demo/AccountEvent@1 = {key: text, op: variant {Deposit: nat, Withdraw: nat}}  (unchanged)
 * State demo/AccountState@2 = {balance: int}
 *
 * Deposit(n) adds n; Withdraw(n) takes n when balance - n stays at or above -ACCOUNT_V2_CREDIT,
 * and is refused with a reason otherwise ("over the credit line: balance -4, asked 200, credit
 * 100"). Amounts over 2^62 fail the step (the balance is a signed 64-bit integer).
 *
 * Upgrade (sys/StateUpgrade@1): from demo/AccountState@1 {balance: nat} to {balance: int}, the
 * same number; any other schema, or a balance over 2^62, fails (the cell stays on @1).
 */
#include "world.h"

#define ACCOUNT_V2_CREDIT 100
#define ACCOUNT_V2_AMOUNT_MAX (1ull << 62)

static int account_key(const world_event *ev, cbor_span *key) {
    return world_event_field(ev, "key", key);
}

static int account_put(world_out *out, int64_t balance) {
    cbor_map rec;
    cbor_map_init(&rec);
    cbor_put_int(cbor_map_key(&rec, "balance"), balance);
    cbor_put_map(world_set_state(out), &rec);
    return WORLD_OK;
}

static int account_step(const cbor_span *state, const world_event *ev, const cbor_span *key,
                        world_out *out) {
    cbor_span op, tag, arg;
    uint64_t amount;
    int64_t balance = 0;
    (void)key;
    if (!world_schema_is(ev, "demo/AccountEvent@1")) return WORLD_EINVAL;
    WORLD_TRY(world_event_field(ev, "op", &op));
    WORLD_TRY(world_variant_read(op, &tag, &arg));
    WORLD_TRY(cbor_read_uint(arg, &amount));
    if (amount > ACCOUNT_V2_AMOUNT_MAX) return WORLD_ERANGE;
    if (state) WORLD_TRY(world_rec_int(*state, "balance", &balance));
    if (world_str_eq(tag, "Deposit")) {
        if (__builtin_add_overflow(balance, (int64_t)amount, &balance)) return WORLD_ERANGE;
    } else if (world_str_eq(tag, "Withdraw")) {
        if (balance - (int64_t)amount < -ACCOUNT_V2_CREDIT) {
            world_buf *why = world_refusal(out);
            world_text(why, "over the credit line: balance ");
            if (balance < 0) {
                world_text(why, "-");
                world_text_uint(why, (uint64_t)(-balance));
            } else {
                world_text_uint(why, (uint64_t)balance);
            }
            world_text(why, ", asked ");
            world_text_uint(why, amount);
            world_text(why, ", credit ");
            world_text_uint(why, ACCOUNT_V2_CREDIT);
            return WORLD_OK;
        }
        balance -= (int64_t)amount;
    } else {
        return WORLD_EINVAL;
    }
    return account_put(out, balance);
}

static int account_upgrade(const cbor_span *old_state, const world_upgrade *up,
                           const cbor_span *key, world_out *out) {
    uint64_t balance;
    (void)key;
    if (!world_str_eq(up->from_schema, "demo/AccountState@1")) return WORLD_EINVAL;
    WORLD_TRY(world_rec_uint(*old_state, "balance", &balance));
    if (balance > ACCOUNT_V2_AMOUNT_MAX) return WORLD_ERANGE;
    return account_put(out, (int64_t)balance);
}

WORLD_CELL_REDUCER_UPGRADABLE(account_step, account_key, account_upgrade)
