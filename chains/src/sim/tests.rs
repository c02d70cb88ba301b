//! Unit tests of the simulated chain: blocks, mempool, execution of every supported shape,
//! gas, injected transfers, reorgs with and without dropping, dropped transactions, and
//! replay of the operation log to the same chain, snapshots (a snapshot and the log's tail
//! replay to the same chain) and the pruning of old history.

use alloy::consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Encodable2718;
use alloy::network::TxSignerSync;
use alloy::primitives::{Address, Bytes, TxKind, B256, U256};
use alloy::signers::local::PrivateKeySigner;

use super::chain::{intrinsic_gas, Genesis, Inject, Op, SimChain, SimError, Snapshot};
use super::client::SimClient;
use super::{BASE_FEE, GENESIS_TREASURY_NATIVE, HOLD_LIMIT, PRIORITY_FEE, RETAIN_BLOCKS};
use crate::address::{create2, deposit_salt, factory_address, forwarder_init_code_hash};
use crate::client::{AssetRef, CallRequest, ChainClient, ClientError, WatchSet};
use crate::evm::sweeper::{erc20_transfer_calldata, factory_deploy_calldata, sweep_calldata};

const CHAIN_ID: u64 = 1;
const T0: u64 = 1_700_000_000_000;

fn key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).unwrap()
}

fn usdt() -> Address {
    Address::repeat_byte(0xdd)
}

fn genesis(treasury: Address) -> Genesis {
    Genesis {
        chain: "ethereum".into(),
        chain_id: CHAIN_ID,
        seed: B256::repeat_byte(7),
        time_ms: T0,
        treasury,
        treasury_native: U256::from(GENESIS_TREASURY_NATIVE),
        treasury_tokens: U256::ZERO,
        tokens: vec![usdt()],
    }
}

fn chain() -> (SimChain, PrivateKeySigner) {
    let k = key();
    (SimChain::new(genesis(k.address())), k)
}

struct Tx {
    nonce: u64,
    to: Address,
    value: U256,
    data: Bytes,
    gas: u64,
    max_fee: u128,
    tip: u128,
}

fn tx(nonce: u64, to: Address) -> Tx {
    Tx {
        nonce,
        to,
        value: U256::ZERO,
        data: Bytes::new(),
        gas: 100_000,
        max_fee: 2 * BASE_FEE + PRIORITY_FEE,
        tip: PRIORITY_FEE,
    }
}

fn sign(k: &PrivateKeySigner, t: Tx) -> (Vec<u8>, B256) {
    let mut tx = TxEip1559 {
        chain_id: CHAIN_ID,
        nonce: t.nonce,
        gas_limit: t.gas,
        max_fee_per_gas: t.max_fee,
        max_priority_fee_per_gas: t.tip,
        to: TxKind::Call(t.to),
        value: t.value,
        access_list: Default::default(),
        input: t.data,
    };
    let sig = k.sign_transaction_sync(&mut tx).unwrap();
    let env = TxEnvelope::from(tx.into_signed(sig));
    (env.encoded_2718(), *env.tx_hash())
}

fn inject(c: &mut SimChain, to: Address, token: Option<Address>, value: u64, tag: u8) -> B256 {
    inject_logged(c, to, token, value, tag).0
}

fn inject_logged(
    c: &mut SimChain,
    to: Address,
    token: Option<Address>,
    value: u64,
    tag: u8,
) -> (B256, Op) {
    let hash = B256::repeat_byte(tag);
    let (op, n, li) = c.inject_op(
        Inject {
            hash,
            from: Address::repeat_byte(0xee),
            to,
            token,
            value: U256::from(value),
        },
        T0 + 1_000,
    );
    assert_eq!(n, c.head() + 1);
    assert_eq!(li, token.map(|_| 0));
    c.apply(&op).unwrap();
    (hash, op)
}

fn watch(addrs: &[Address]) -> WatchSet {
    WatchSet::new(addrs.iter().map(|a| (*a, uuid::Uuid::nil())), vec![usdt()])
}

/// Replays `log` from genesis and checks the result is the same chain as `c`.
fn assert_replays(c: &SimChain, log: &[Op], owners: &[Address]) {
    let mut r = SimChain::new(c.genesis().clone());
    for op in log {
        let json = serde_json::to_string(op).unwrap();
        let back: Op = serde_json::from_str(&json).unwrap();
        r.apply(&back).unwrap();
    }
    assert_eq!(r.head(), c.head());
    for n in 0..=c.head() {
        assert_eq!(r.block(n), c.block(n), "block {n}");
    }
    for a in owners {
        assert_eq!(r.balance(*a, None), c.balance(*a, None));
        assert_eq!(r.balance(*a, Some(usdt())), c.balance(*a, Some(usdt())));
        assert_eq!(r.nonce(*a, false), c.nonce(*a, false));
    }
    assert_eq!(
        r.snapshot(),
        c.snapshot(),
        "the whole state and history held"
    );
}

#[test]
fn blocks_link_by_parent_hash_and_are_per_seed() {
    let (mut c, _) = chain();
    let ops = c.mine(3, T0 + 12_000, 12_000);
    assert_eq!(
        ops.len(),
        1,
        "three empty blocks are one operation: {ops:?}"
    );
    assert_eq!(c.head(), 3);
    for n in 1..=3 {
        let b = c.block(n).unwrap();
        assert_eq!(b.parent_hash, c.block(n - 1).unwrap().hash);
        assert_eq!(b.timestamp, (T0 + 12_000 * n) / 1000);
    }
    assert!(c.block(4).is_none());
    let mut g = c.genesis().clone();
    g.seed = B256::repeat_byte(8);
    let mut other = SimChain::new(g);
    other.mine(3, T0 + 12_000, 12_000);
    assert_ne!(other.block(2).unwrap().hash, c.block(2).unwrap().hash);
}

#[test]
fn a_broadcast_is_mined_in_a_later_block_and_charges_gas() {
    let (mut c, k) = chain();
    let dest = Address::repeat_byte(1);
    let mut t = tx(0, dest);
    t.value = U256::from(5u64);
    let (raw, hash) = sign(&k, t);
    assert_eq!(c.submit(&raw).unwrap(), hash);
    assert_eq!(
        c.submit(&raw).unwrap(),
        hash,
        "a known transaction answers its hash"
    );
    assert!(c.receipt(hash).is_none(), "not mined at broadcast");
    assert!(c.knows_tx(hash));
    assert_eq!(c.nonce(k.address(), true), 1);
    assert_eq!(c.nonce(k.address(), false), 0);
    let ops = c.mine(1, T0 + 1, 0);
    assert!(matches!(&ops[0], Op::Block { txs, .. } if txs.len() == 1));
    let r = c.receipt(hash).unwrap();
    assert!(r.success);
    assert_eq!(r.block_number, 1);
    assert_eq!(r.block_hash, c.block(1).unwrap().hash);
    assert_eq!(r.gas_used, 21_000);
    assert_eq!(c.balance(dest, None), U256::from(5u64));
    let paid = U256::from(21_000u64) * U256::from(BASE_FEE + PRIORITY_FEE) + U256::from(5u64);
    assert_eq!(
        c.balance(k.address(), None),
        U256::from(GENESIS_TREASURY_NATIVE) - paid
    );
    assert_eq!(c.nonce(k.address(), false), 1);
    // The native transfer is seen by a range scan of a watcher of `dest`.
    let scan = c.transfers(0, 1, &watch(&[dest])).unwrap();
    assert_eq!(scan.blocks.len(), 2);
    assert_eq!(scan.transfers.len(), 1);
    assert_eq!(scan.transfers[0].tx_hash, hash);
    assert_eq!(scan.transfers[0].log_index, None);
    assert_eq!(scan.transfers[0].value, U256::from(5u64));
}

#[test]
fn a_vouched_send_is_admitted_and_mined_like_a_recovered_one() {
    let (mut c, k) = chain();
    let dest = Address::repeat_byte(1);
    let (raw, hash) = sign(&k, tx(0, dest));
    // Tests run debug builds, which recover a vouched sender anyway: a wrong one is refused.
    assert!(matches!(
        c.submit_vouched(&raw, Address::repeat_byte(9)),
        Err(SimError::Rejected(m)) if m.contains("vouched")
    ));
    assert!(!c.knows_tx(hash));
    assert_eq!(c.submit_vouched(&raw, k.address()).unwrap(), hash);
    assert_eq!(c.nonce(k.address(), true), 1);
    // The admission rules still apply to a vouched send.
    let (late, _) = sign(&k, tx(0, Address::repeat_byte(2)));
    c.mine(1, T0 + 1, 0);
    assert!(matches!(
        c.submit_vouched(&late, k.address()),
        Err(SimError::Rejected(m)) if m.contains("nonce too low")
    ));
    assert!(c.receipt(hash).unwrap().success);
    assert_eq!(c.nonce(k.address(), false), 1);
}

#[test]
fn admission_rules_refuse_what_a_node_refuses() {
    let (mut c, k) = chain();
    let d = Address::repeat_byte(1);
    let mut t = tx(0, d);
    t.max_fee = BASE_FEE - 1;
    t.tip = 1;
    assert!(
        matches!(c.submit(&sign(&k, t).0), Err(SimError::Rejected(m)) if m.contains("base fee"))
    );
    let mut t = tx(0, d);
    t.gas = 20_000;
    assert!(
        matches!(c.submit(&sign(&k, t).0), Err(SimError::Rejected(m)) if m.contains("intrinsic"))
    );
    let mut t = tx(0, d);
    t.value = U256::from(GENESIS_TREASURY_NATIVE);
    assert!(
        matches!(c.submit(&sign(&k, t).0), Err(SimError::Rejected(m)) if m.contains("insufficient funds"))
    );
    assert!(matches!(c.submit(&[1, 2, 3]), Err(SimError::Rejected(_))));
    // Nonce too low once mined; replacement needs +10% on both fees.
    let (raw, _) = sign(&k, tx(0, d));
    c.submit(&raw).unwrap();
    let mut same = tx(0, d);
    same.data = Bytes::from_static(&[1]);
    assert!(
        matches!(c.submit(&sign(&k, same).0), Err(SimError::Rejected(m)) if m.contains("underpriced"))
    );
    let mut bumped = tx(0, d);
    bumped.max_fee = (2 * BASE_FEE + PRIORITY_FEE) * 2;
    bumped.tip = PRIORITY_FEE * 2;
    let (raw2, h2) = sign(&k, bumped);
    c.submit(&raw2).unwrap();
    assert_eq!(c.pending(), vec![h2], "the replacement took the slot");
    c.mine(1, T0, 0);
    assert!(c.receipt(h2).is_some());
    let (late, _) = sign(&k, tx(0, d));
    assert!(matches!(c.submit(&late), Err(SimError::Rejected(m)) if m.contains("nonce too low")));
    // Another chain id is refused.
    let mut g = c.genesis().clone();
    g.chain_id = 56;
    let mut bsc = SimChain::new(g);
    assert!(
        matches!(bsc.submit(&sign(&k, tx(0, d)).0), Err(SimError::Rejected(m)) if m.contains("chain id"))
    );
}

#[test]
fn a_nonce_gap_waits_and_a_fill_unblocks_it() {
    let (mut c, k) = chain();
    let me = k.address();
    let (raw1, h1) = sign(&k, tx(1, Address::repeat_byte(1)));
    c.submit(&raw1).unwrap();
    c.mine(3, T0, 0);
    assert!(c.receipt(h1).is_none(), "nonce 1 waits behind nonce 0");
    assert_eq!(c.nonce(me, true), 0, "pending nonce stops at the gap");
    // A zero-value self-transfer fills nonce 0.
    let (raw0, h0) = sign(&k, tx(0, me));
    c.submit(&raw0).unwrap();
    c.mine(1, T0, 0);
    let (r0, r1) = (c.receipt(h0).unwrap(), c.receipt(h1).unwrap());
    assert!(r0.success && r1.success);
    assert_eq!(
        r0.block_number, r1.block_number,
        "both in the same block, in nonce order"
    );
    assert_eq!(c.nonce(me, false), 2);
}

#[test]
fn token_transfer_forwarder_deploy_and_sweep() {
    let (mut c, k) = chain();
    let me = k.address();
    let factory = Address::from(factory_address(&me.0 .0));
    let salt = deposit_salt(uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
    let fwd = Address::from(create2(&factory.0 .0, &salt, &forwarder_init_code_hash()));
    // Funds arrive at the (not yet deployed) forwarder: a token and the native coin.
    inject(&mut c, fwd, Some(usdt()), 7_000_000, 0xa1);
    inject(&mut c, fwd, None, 3_000, 0xa2);
    let scan = c.transfers(1, c.head(), &watch(&[fwd])).unwrap();
    assert_eq!(scan.transfers.len(), 2);
    assert_eq!(scan.transfers[0].log_index, Some(0));
    assert_eq!(scan.transfers[0].token, Some(usdt()));
    assert_eq!(scan.transfers[1].log_index, None);
    // Sweeping before the factory exists is a plain call to an empty account: no effect.
    assert!(!c.has_code(factory));
    // Deploy the factory through the proxy.
    let proxy = Address::from(crate::address::DEPLOYMENT_PROXY);
    let data = factory_deploy_calldata(&me);
    let call = CallRequest {
        from: me,
        to: proxy,
        value: U256::ZERO,
        data: data.clone(),
    };
    let gas = c.estimate_gas(&call).unwrap();
    let mut t = tx(0, proxy);
    t.data = data;
    t.gas = gas;
    let (raw, hd) = sign(&k, t);
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    assert!(c.receipt(hd).unwrap().success);
    assert!(c.has_code(factory));
    assert_eq!(c.receipt(hd).unwrap().gas_used, gas);
    // The factory answers its treasury and forwarder addresses.
    let w = c
        .call(
            factory,
            &crate::evm::sweeper::forwarder_address_calldata(salt),
        )
        .unwrap();
    assert_eq!(&w[12..], fwd.as_slice());
    // A second deployment reverts (and still uses the nonce and gas).
    let mut t = tx(1, proxy);
    t.data = factory_deploy_calldata(&me);
    t.gas = gas;
    let (raw, h2) = sign(&k, t);
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    assert!(!c.receipt(h2).unwrap().success);
    assert_eq!(c.nonce(me, false), 2);
    // Sweep: deploys the forwarder and flushes both assets to the treasury.
    let before = c.balance(me, None);
    let data = sweep_calldata(salt, &[usdt(), Address::ZERO]);
    let mut t = tx(2, factory);
    t.data = data;
    t.gas = 200_000;
    let (raw, hs) = sign(&k, t);
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    let r = c.receipt(hs).unwrap();
    assert!(r.success);
    assert!(c.has_code(fwd));
    assert_eq!(c.balance(fwd, Some(usdt())), U256::ZERO);
    assert_eq!(c.balance(fwd, None), U256::ZERO);
    assert_eq!(c.balance(me, Some(usdt())), U256::from(7_000_000u64));
    let fee = U256::from(r.gas_used) * U256::from(BASE_FEE + PRIORITY_FEE);
    assert_eq!(c.balance(me, None), before - fee + U256::from(3_000u64));
    // The sweep's token log is a transfer to the treasury.
    let scan = c.transfers(c.head(), c.head(), &watch(&[me])).unwrap();
    assert_eq!(scan.transfers.len(), 1);
    assert_eq!(scan.transfers[0].from, fwd);
    // ERC-20 payout from the treasury; too much reverts.
    let dest = Address::repeat_byte(9);
    let mut t = tx(3, usdt());
    t.data = erc20_transfer_calldata(&dest, U256::from(2_000_000u64));
    let (raw, hp) = sign(&k, t);
    c.submit(&raw).unwrap();
    let mut t = tx(4, usdt());
    t.data = erc20_transfer_calldata(&dest, U256::from(9_000_000u64));
    let (raw, hbad) = sign(&k, t);
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    assert!(c.receipt(hp).unwrap().success);
    assert!(
        !c.receipt(hbad).unwrap().success,
        "over the balance reverts"
    );
    assert_eq!(c.balance(dest, Some(usdt())), U256::from(2_000_000u64));
    assert_eq!(c.balance(me, Some(usdt())), U256::from(5_000_000u64));
    let bal = c
        .call(usdt(), &{
            let mut d = alloy::primitives::keccak256("balanceOf(address)")[..4].to_vec();
            d.extend_from_slice(&[0u8; 12]);
            d.extend_from_slice(dest.as_slice());
            d
        })
        .unwrap();
    assert_eq!(U256::from_be_slice(&bal), U256::from(2_000_000u64));
    assert!(c
        .estimate_gas(&CallRequest {
            from: me,
            to: usdt(),
            value: U256::ZERO,
            data: erc20_transfer_calldata(&dest, U256::from(1u64) << 100),
        })
        .is_err());
}

#[test]
fn a_recipient_ending_in_fa11_rejects_transfers() {
    let (mut c, k) = chain();
    inject(&mut c, k.address(), Some(usdt()), 10, 0xb2);
    let bad: Address = "0xabababababababababababababababababab0011"
        .replace("0011", "fa11")
        .parse()
        .unwrap();
    let mut t = tx(0, usdt());
    t.data = erc20_transfer_calldata(&bad, U256::from(5u64));
    let (raw, h) = sign(&k, t);
    let mut n = tx(1, bad);
    n.value = U256::from(1u64);
    let (raw2, h2) = sign(&k, n);
    c.submit(&raw).unwrap();
    c.submit(&raw2).unwrap();
    c.mine(1, T0, 0);
    assert!(!c.receipt(h).unwrap().success);
    assert!(!c.receipt(h2).unwrap().success);
    assert_eq!(c.balance(bad, Some(usdt())), U256::ZERO);
    assert_eq!(c.balance(bad, None), U256::ZERO);
    assert_eq!(
        c.nonce(k.address(), false),
        2,
        "reverted transactions use their nonce"
    );
}

#[test]
fn out_of_gas_reverts_but_charges_the_limit() {
    let (mut c, k) = chain();
    inject(&mut c, k.address(), Some(usdt()), 10, 0xb1);
    let mut t = tx(0, usdt());
    t.data = erc20_transfer_calldata(&Address::repeat_byte(2), U256::from(5u64));
    t.gas = intrinsic_gas(&t.data);
    let limit = t.gas;
    let (raw, h) = sign(&k, t);
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    let r = c.receipt(h).unwrap();
    assert!(!r.success);
    assert_eq!(r.gas_used, limit);
    assert_eq!(c.balance(k.address(), Some(usdt())), U256::from(10u64));
}

#[test]
fn reorg_with_drop_removes_transactions_and_returns_state() {
    let (mut c, k) = chain();
    let dest = Address::repeat_byte(3);
    let mut log = Vec::new();
    log.extend(c.mine(2, T0, 0));
    let mut t = tx(0, dest);
    t.value = U256::from(100u64);
    let (raw, h) = sign(&k, t);
    c.submit(&raw).unwrap();
    log.extend(c.mine(1, T0, 0));
    let (dep, op) = inject_logged(&mut c, dest, Some(usdt()), 50, 0xc1);
    log.push(op);
    log.extend(c.mine(2, T0, 0));
    let head = c.head();
    let old = c.block(head - 2).unwrap();
    assert_eq!(c.balance(dest, None), U256::from(100u64));
    let reorg = Op::Reorg {
        depth: 4,
        drop: true,
        t_ms: T0 + 5_000,
    };
    c.apply(&reorg).unwrap();
    log.push(reorg);
    assert_eq!(c.head(), head, "the head's number stays");
    assert_ne!(
        c.block(head - 2).unwrap().hash,
        old.hash,
        "replaced blocks change hash"
    );
    assert_eq!(
        c.block(head - 3).unwrap().parent_hash,
        c.block(head - 4).unwrap().hash
    );
    assert!(c.receipt(h).is_none());
    assert!(c.receipt(dep).is_none());
    assert!(!c.knows_tx(h), "dropped: not in the mempool either");
    assert_eq!(c.balance(dest, None), U256::ZERO);
    assert_eq!(c.balance(dest, Some(usdt())), U256::ZERO);
    assert_eq!(c.nonce(k.address(), false), 0);
    assert_eq!(
        c.balance(k.address(), None),
        U256::from(GENESIS_TREASURY_NATIVE),
        "the gas of the removed transaction is refunded by the reorg"
    );
    assert!(c
        .transfers(1, head, &watch(&[dest]))
        .unwrap()
        .transfers
        .is_empty());
    // The stored bytes can be broadcast again and mine in a later block.
    c.submit(&raw).unwrap();
    log.extend(c.mine(1, T0 + 9_000, 0));
    assert_eq!(c.receipt(h).unwrap().block_number, head + 1);
    assert_replays(&c, &log, &[dest, k.address()]);
    // Bounds.
    assert!(c.check_reorg(0).is_err());
    assert!(c.check_reorg(c.head() + 1).is_err());
    assert!(c
        .apply(&Op::Reorg {
            depth: c.head() + 1,
            drop: true,
            t_ms: T0
        })
        .is_err());
}

#[test]
fn reorg_without_drop_returns_transactions_to_the_mempool() {
    let (mut c, k) = chain();
    let dest = Address::repeat_byte(4);
    let mut log = Vec::new();
    let mut t = tx(0, dest);
    t.value = U256::from(1u64);
    let (raw0, h0) = sign(&k, t);
    let mut t = tx(1, dest);
    t.value = U256::from(2u64);
    let (raw1, h1) = sign(&k, t);
    c.submit(&raw0).unwrap();
    log.extend(c.mine(1, T0, 0));
    c.submit(&raw1).unwrap();
    log.extend(c.mine(3, T0, 0));
    let reorg = Op::Reorg {
        depth: 4,
        drop: false,
        t_ms: T0,
    };
    c.apply(&reorg).unwrap();
    log.push(reorg);
    assert!(c.receipt(h0).is_none() && c.receipt(h1).is_none());
    assert_eq!(c.pending(), vec![h0, h1], "back in the mempool, in order");
    assert_eq!(c.nonce(k.address(), true), 2);
    log.extend(c.mine(1, T0, 0));
    assert_eq!(c.receipt(h0).unwrap().block_number, 5);
    assert_eq!(c.receipt(h1).unwrap().block_number, 5);
    assert_eq!(c.balance(dest, None), U256::from(3u64));
    assert_replays(&c, &log, &[dest, k.address()]);
}

#[test]
fn a_dropped_pending_transaction_is_forgotten() {
    let (mut c, k) = chain();
    let (raw, h) = sign(&k, tx(0, Address::repeat_byte(5)));
    c.submit(&raw).unwrap();
    assert!(c.drop_pending(h));
    assert!(
        !c.drop_pending(h),
        "only a pending transaction can be dropped"
    );
    assert!(!c.knows_tx(h));
    c.mine(1, T0, 0);
    assert!(c.receipt(h).is_none());
    assert_eq!(c.nonce(k.address(), true), 0);
    // Rebroadcast repairs it.
    c.submit(&raw).unwrap();
    c.mine(1, T0, 0);
    assert!(c.receipt(h).unwrap().success);
    assert!(!c.drop_pending(h), "a mined transaction is not dropped");
}

#[test]
fn empty_timer_blocks_coalesce_into_one_deferred_operation() {
    let (mut c, _) = chain();
    let step = 2_000;
    let mut log = Vec::new();
    for i in 1..=50u64 {
        // A little jitter around the grid still continues the run.
        let ops = c.mine(1, T0 + i * step + (i % 3) * 100, step);
        c.defer(ops).unwrap();
    }
    assert!(c.has_unflushed());
    let flushed = c.take_unflushed();
    assert_eq!(flushed.len(), 1, "{flushed:?}");
    assert!(matches!(flushed[0], Op::Empty { count: 50, .. }));
    log.extend(flushed);
    assert!(!c.has_unflushed());
    assert_eq!(c.head(), 50);
    assert_replays(&c, &log, &[]);
    // Timestamps never go back, even when the wall clock does.
    let before = c.block(c.head()).unwrap().timestamp;
    log.extend(c.mine(1, T0, 0));
    assert!(c.block(c.head()).unwrap().timestamp >= before);
    // A non-empty operation cannot be deferred.
    let (mut c2, k) = chain();
    c2.submit(&sign(&k, tx(0, Address::repeat_byte(1))).0)
        .unwrap();
    let ops = c2.mine(2, T0, 0);
    assert!(c2.defer(ops).is_err());
}

#[test]
fn replay_is_exact_across_every_operation() {
    let (mut c, k) = chain();
    let me = k.address();
    let mut log = Vec::new();
    let dest = Address::repeat_byte(6);
    for i in 0..5u64 {
        let mut t = tx(i, dest);
        t.value = U256::from(10 + i);
        c.submit(&sign(&k, t).0).unwrap();
        log.extend(c.mine(1 + i, T0 + i * 1_000, 500));
    }
    let (op, _, _) = c.inject_op(
        Inject {
            hash: B256::repeat_byte(0xd1),
            from: Address::repeat_byte(0xee),
            to: dest,
            token: Some(usdt()),
            value: U256::from(77u64),
        },
        T0 + 99_000,
    );
    c.apply(&op).unwrap();
    log.push(op);
    let r = Op::Reorg {
        depth: 3,
        drop: false,
        t_ms: T0 + 100_000,
    };
    c.apply(&r).unwrap();
    log.push(r);
    log.extend(c.mine(2, T0 + 101_000, 0));
    assert_replays(&c, &log, &[me, dest]);
}

#[tokio::test]
async fn the_client_is_the_chain_seam() {
    let (c, k) = chain();
    let client = SimClient::new(c);
    let seam: std::sync::Arc<dyn ChainClient> = std::sync::Arc::new(client.clone());
    assert_eq!(seam.chain(), "ethereum");
    assert_eq!(seam.head().await.unwrap(), 0);
    let (raw, h) = sign(&k, tx(0, Address::repeat_byte(1)));
    assert_eq!(seam.broadcast(&raw).await.unwrap(), h);
    assert!(seam.knows_tx(h).await.unwrap());
    assert!(seam.receipt(h).await.unwrap().is_none());
    assert_eq!(seam.nonce(k.address(), true).await.unwrap(), 1);
    client.chain_state().lock().await.mine(1, T0, 0);
    assert_eq!(seam.head().await.unwrap(), 1);
    assert!(seam.receipt(h).await.unwrap().unwrap().success);
    let f = seam.fees().await.unwrap();
    assert!(f.max_fee_per_gas >= BASE_FEE && f.max_priority_fee_per_gas <= f.max_fee_per_gas);
    assert!(
        seam.balance(k.address(), AssetRef::Native).await.unwrap()
            < U256::from(GENESIS_TREASURY_NATIVE)
    );
    assert!(matches!(
        seam.broadcast(&raw[..10]).await,
        Err(ClientError::Refused { .. })
    ));
    assert!(matches!(
        seam.transfers(0, 5, &WatchSet::default()).await,
        Err(ClientError::Moving(_))
    ));
    assert!(seam.code(usdt()).await.unwrap().len() == 1);
    assert!(seam.code(k.address()).await.unwrap().is_empty());
}

/// A snapshot through a self-describing codec (JSON here; the binary stores it as
/// positional MessagePack) and back.
fn through_codec(s: &Snapshot) -> Snapshot {
    let json = serde_json::to_vec(s).unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// `a` and `b` answer the same: blocks held (and block 0), receipts of `txs`, balances and
/// nonces of `owners`, and the same snapshot.
fn assert_same(a: &SimChain, b: &SimChain, txs: &[B256], owners: &[Address]) {
    assert_eq!(a.head(), b.head());
    assert_eq!(a.pruned_to(), b.pruned_to());
    assert_eq!(a.block(0), b.block(0));
    for n in a.pruned_to().saturating_sub(2)..=a.head() {
        assert_eq!(a.block(n), b.block(n), "block {n}");
    }
    for h in txs {
        assert_eq!(a.receipt(*h), b.receipt(*h), "receipt {h}");
        assert_eq!(a.knows_tx(*h), b.knows_tx(*h));
    }
    for o in owners {
        assert_eq!(a.balance(*o, None), b.balance(*o, None));
        assert_eq!(a.balance(*o, Some(usdt())), b.balance(*o, Some(usdt())));
        assert_eq!(a.nonce(*o, false), b.nonce(*o, false));
    }
    assert_eq!(a.snapshot(), b.snapshot());
}

/// An injected transfer of `value` to `to` (hash from `i`), applied and logged.
fn inject_n(
    c: &mut SimChain,
    log: &mut Vec<Op>,
    to: Address,
    token: Option<Address>,
    i: u64,
) -> B256 {
    let mut h = [0u8; 32];
    h[..8].copy_from_slice(&i.to_be_bytes());
    h[31] = 0x5a;
    let hash = B256::from(h);
    let (op, _, _) = c.inject_op(
        Inject {
            hash,
            from: Address::repeat_byte(0xee),
            to,
            token,
            value: U256::from(1 + i % 7),
        },
        T0 + i * 10,
    );
    c.apply(&op).unwrap();
    log.push(op);
    hash
}

/// Signed sends, injected token and native transfers, a contract deployment, empty runs
/// and a reorg: a chain restored from its snapshot answers as the chain does, and both
/// stay the same through the same further operations (including a reorg that removes
/// blocks mined before the snapshot).
#[test]
fn a_snapshot_round_trip_equals_the_chain() {
    let (mut c, k) = chain();
    let me = k.address();
    let dest = Address::repeat_byte(6);
    let mut log = Vec::new();
    let mut txs = Vec::new();
    for i in 0..4u64 {
        let mut t = tx(i, dest);
        t.value = U256::from(10 + i);
        let (raw, h) = sign(&k, t);
        c.submit(&raw).unwrap();
        txs.push(h);
        log.extend(c.mine(1 + i, T0 + i * 1_000, 500));
    }
    // The factory, deployed through the proxy: code in the state.
    let proxy = Address::from(crate::address::DEPLOYMENT_PROXY);
    let mut t = tx(4, proxy);
    t.data = factory_deploy_calldata(&me);
    t.gas = 5_000_000;
    let (raw, h) = sign(&k, t);
    c.submit(&raw).unwrap();
    txs.push(h);
    log.extend(c.mine(1, T0 + 10_000, 0));
    assert!(c.has_code(Address::from(factory_address(&me.0 .0))));
    for i in 0..6 {
        txs.push(inject_n(&mut c, &mut log, dest, (i % 2 == 0).then(usdt), i));
    }
    c.apply(&Op::Reorg {
        depth: 2,
        drop: true,
        t_ms: T0 + 20_000,
    })
    .unwrap();
    log.push(Op::Reorg {
        depth: 2,
        drop: true,
        t_ms: T0 + 20_000,
    });
    log.extend(c.mine(3, T0 + 21_000, 1_000));

    let snap = c.snapshot();
    assert_eq!(snap.head, c.head());
    assert!(!snap.blocks.is_empty() && !snap.tokens.is_empty() && !snap.code.is_empty());
    let mut r = SimChain::restore(c.genesis().clone(), through_codec(&snap)).unwrap();
    let owners = [me, dest, Address::repeat_byte(0xee)];
    assert_same(&c, &r, &txs, &owners);

    // The same operations after the snapshot, a reorg reaching below it included.
    let mut tail = Vec::new();
    let mut t = tx(5, dest);
    t.value = U256::from(99u64);
    let (raw, h) = sign(&k, t);
    c.submit(&raw).unwrap();
    txs.push(h);
    tail.extend(c.mine(1, T0 + 30_000, 0));
    for i in 100..103 {
        txs.push(inject_n(&mut c, &mut tail, dest, Some(usdt()), i));
    }
    tail.push(Op::Reorg {
        depth: 12,
        drop: true,
        t_ms: T0 + 40_000,
    });
    c.apply(tail.last().unwrap()).unwrap();
    tail.extend(c.mine(2, T0 + 41_000, 0));
    for op in &tail {
        r.apply(op).unwrap();
    }
    assert_same(&c, &r, &txs, &owners);

    // Signed transactions are stored with their sender; one named wrongly is refused
    // (debug builds recover it), one stored without (the first format) is recovered.
    use super::chain::snapshot::SnapTx;
    let signed_at = |s: &Snapshot| {
        s.blocks
            .iter()
            .enumerate()
            .find_map(|(i, b)| matches!(b.txs[0], SnapTx::SignedBy(..)).then_some(i))
            .expect("a held block with a signed transaction")
    };
    let i = signed_at(&snap);
    let mut forged = snap.clone();
    let SnapTx::SignedBy(raw, _) = forged.blocks[i].txs[0].clone() else {
        unreachable!()
    };
    forged.blocks[i].txs[0] = SnapTx::SignedBy(raw.clone(), Address::repeat_byte(0x99));
    if cfg!(debug_assertions) {
        assert!(SimChain::restore(c.genesis().clone(), forged).is_err());
    }
    let mut older = snap.clone();
    older.blocks[i].txs[0] = SnapTx::Signed(raw);
    let o = SimChain::restore(c.genesis().clone(), older).unwrap();
    assert_eq!(o.snapshot(), snap);

    // Another chain's snapshot does not load.
    let mut other = c.genesis().clone();
    other.seed = B256::repeat_byte(8);
    assert!(matches!(
        SimChain::restore(other, snap),
        Err(SimError::Replay(_))
    ));
}

/// A snapshot taken at any point of the log, then the operations after it, give the same
/// chain as replaying the whole log from genesis (`replay_is_exact_across_every_operation`
/// for snapshot plus tail), pruning included.
#[test]
fn a_snapshot_and_the_tail_of_the_log_replay_exactly() {
    let (mut c, k) = chain();
    let dest = Address::repeat_byte(9);
    let mut log = Vec::new();
    let mut txs = Vec::new();
    for i in 0..3u64 {
        let mut t = tx(i, dest);
        t.value = U256::from(5 + i);
        let (raw, h) = sign(&k, t);
        c.submit(&raw).unwrap();
        txs.push(h);
        log.extend(c.mine(2, T0 + i * 1_000, 300));
    }
    for i in 0..RETAIN_BLOCKS / 2 {
        txs.push(inject_n(&mut c, &mut log, dest, Some(usdt()), i));
    }
    log.extend(c.mine(RETAIN_BLOCKS, T0 + 10_000_000, 1_000));
    log.push(Op::Reorg {
        depth: 700,
        drop: false,
        t_ms: T0 + 30_000_000,
    });
    c.apply(log.last().unwrap()).unwrap();
    for i in 0..50 {
        txs.push(inject_n(&mut c, &mut log, dest, None, 1_000_000 + i));
    }
    assert!(c.pruned_to() > 0, "the history was pruned");
    let owners = [k.address(), dest];
    for cut in [
        0,
        1,
        4,
        log.len() / 3,
        log.len() - 52,
        log.len() - 1,
        log.len(),
    ] {
        let mut head = SimChain::new(c.genesis().clone());
        for op in &log[..cut] {
            head.apply(op).unwrap();
        }
        let mut r =
            SimChain::restore(c.genesis().clone(), through_codec(&head.snapshot())).unwrap();
        for op in &log[cut..] {
            r.apply(op).unwrap();
        }
        assert_same(&c, &r, &txs, &owners);
    }
    assert_replays(&c, &log, &owners);
}

/// Many blocks: the blocks, transactions and runs held stay within `RETAIN_BLOCKS`; what
/// is pruned answers as a node that expired its history (no block, no receipt, a range
/// scan refused); the newest blocks still answer and link to the pruned one.
#[test]
fn pruning_keeps_the_history_held_bounded() {
    let (mut c, _k) = chain();
    let dest = Address::repeat_byte(0x31);
    let mut log = Vec::new();
    let first = inject_n(&mut c, &mut log, dest, Some(usdt()), 0);
    let mut last = first;
    for i in 1..3 * RETAIN_BLOCKS {
        if i % 1_000 == 0 {
            log.extend(c.mine(7, T0 + i * 10, 100));
        }
        last = inject_n(&mut c, &mut log, dest, Some(usdt()), i);
        assert!(c.blocks_held() as u64 <= RETAIN_BLOCKS);
        assert!(c.transactions_held() as u64 <= RETAIN_BLOCKS);
    }
    let head = c.head();
    assert_eq!(c.pruned_to(), head - RETAIN_BLOCKS);
    let held = c.blocks_held();
    assert!(
        (RETAIN_BLOCKS - 70..RETAIN_BLOCKS).contains(&(held as u64)),
        "the held window less its runs of 7 empty blocks: {held}"
    );
    assert!(c.receipt(first).is_none() && !c.knows_tx(first));
    assert_eq!(c.receipt(last).unwrap().block_number, head);
    assert!(c.block(1).is_none() && c.block(c.pruned_to()).is_none());
    assert!(c.block(0).is_some());
    let oldest = c.block(c.pruned_to() + 1).unwrap();
    assert_ne!(oldest.parent_hash, B256::ZERO);
    assert!(matches!(
        c.transfers(c.pruned_to(), head, &watch(&[dest])),
        Err(SimError::Invalid(_))
    ));
    let scan = c
        .transfers(c.pruned_to() + 1, head, &watch(&[dest]))
        .unwrap();
    assert_eq!(scan.blocks.len() as u64, RETAIN_BLOCKS);
    assert_eq!(scan.transfers.len(), held);
    // The balance counts every transfer, pruned or not.
    let total: u64 = (0..3 * RETAIN_BLOCKS).map(|i| 1 + i % 7).sum();
    assert_eq!(c.balance(dest, Some(usdt())), U256::from(total));
    // A snapshot holds the window, not the history.
    let snap = c.snapshot();
    assert_eq!(snap.blocks.len(), held);
    assert!(snap.runs.len() <= 11);
    assert_replays(&c, &log, &[dest]);
}

/// After pruning, a reorg within the held blocks still unwinds exactly (state, receipts,
/// hashes), one down to the newest pruned block works, and one reaching below it is
/// refused.
#[test]
fn a_reorg_within_the_held_history_works_after_pruning() {
    let (mut c, _k) = chain();
    let dest = Address::repeat_byte(0x41);
    let mut log = Vec::new();
    let mut hashes = Vec::new();
    let mut balances = Vec::new();
    for i in 0..RETAIN_BLOCKS + 2_500 {
        balances.push(c.balance(dest, Some(usdt())));
        hashes.push(inject_n(&mut c, &mut log, dest, Some(usdt()), i));
    }
    assert_eq!(c.pruned_to(), 2_500);
    let head = c.head();
    let kept = c.block(head - 1_000).unwrap();
    let gone = c.block(head - 999).unwrap();
    c.apply(&Op::Reorg {
        depth: 1_000,
        drop: true,
        t_ms: T0 + 1,
    })
    .unwrap();
    log.push(Op::Reorg {
        depth: 1_000,
        drop: true,
        t_ms: T0 + 1,
    });
    assert_eq!(c.head(), head);
    assert_eq!(
        c.balance(dest, Some(usdt())),
        balances[(head - 1_000) as usize]
    );
    assert_eq!(c.block(head - 1_000), Some(kept));
    assert_ne!(c.block(head - 999).unwrap().hash, gone.hash);
    assert!(c.receipt(hashes[(head - 1) as usize]).is_none());
    assert!(c.receipt(hashes[(head - 1_001) as usize]).is_some());
    // Deeper than what is held: refused, nothing changes.
    let most = c.head() - c.pruned_to();
    assert!(c.check_reorg(most + 1).is_err());
    let before = c.snapshot();
    assert!(c
        .apply(&Op::Reorg {
            depth: most + 1,
            drop: true,
            t_ms: T0 + 2
        })
        .is_err());
    assert_eq!(c.snapshot(), before);
    // Down to the newest pruned block exactly: the state it had.
    c.apply(&Op::Reorg {
        depth: most,
        drop: true,
        t_ms: T0 + 3,
    })
    .unwrap();
    log.push(Op::Reorg {
        depth: most,
        drop: true,
        t_ms: T0 + 3,
    });
    assert_eq!(
        c.balance(dest, Some(usdt())),
        balances[c.pruned_to() as usize]
    );
    assert_eq!(c.block(c.pruned_to() + 1).unwrap().parent_hash, {
        let mut r = SimChain::new(c.genesis().clone());
        for op in &log[..c.pruned_to() as usize] {
            r.apply(op).unwrap();
        }
        r.block(c.pruned_to()).unwrap().hash
    });
    assert_replays(&c, &log, &[dest]);
}

/// A reader's hold ([`SimChain::hold_from`]): the blocks a lagging reader still needs stay
/// held past the retention (blocks, receipts, range scans, reorgs), up to `HOLD_LIMIT`
/// below the head; once the reader moves on they are pruned at the next block. A replay
/// with the hold `Some(0)` (how a stored chain loads) holds at least what the run held, so
/// a reorg that run accepted replays; without a hold the same log does not.
#[test]
fn a_readers_hold_keeps_the_blocks_it_still_needs() {
    let (mut c, _k) = chain();
    c.set_retain_blocks(100);
    c.hold_from(Some(1));
    let dest = Address::repeat_byte(0x51);
    let mut log = Vec::new();
    let hashes: Vec<B256> = (0..500)
        .map(|i| inject_n(&mut c, &mut log, dest, Some(usdt()), i))
        .collect();
    assert_eq!(c.pruned_to(), 0, "the reader still needs block 1");
    assert_eq!(c.receipt(hashes[0]).unwrap().block_number, 1);
    let scan = c.transfers(1, c.head(), &watch(&[dest])).unwrap();
    assert_eq!(scan.transfers.len(), 500);
    // A reorg deeper than the retention, within the hold.
    let reorg = Op::Reorg {
        depth: 300,
        drop: true,
        t_ms: T0 + 1,
    };
    c.apply(&reorg).unwrap();
    log.push(reorg);
    assert!(c.receipt(hashes[250]).is_none() && c.receipt(hashes[150]).is_some());

    // The reader moves on: pruned at the next block, to the retention or just below the
    // hold, whichever is older.
    c.hold_from(Some(350));
    inject_n(&mut c, &mut log, dest, Some(usdt()), 500);
    assert_eq!(c.pruned_to(), 349);
    assert!(c.receipt(hashes[348]).is_none());
    c.hold_from(Some(c.head()));
    inject_n(&mut c, &mut log, dest, Some(usdt()), 501);
    assert_eq!(c.pruned_to(), c.head() - 100);

    // A stored chain loads with the hold Some(0): nothing pruned within HOLD_LIMIT, and the
    // reorg replays.
    let mut r = SimChain::new(c.genesis().clone());
    r.set_retain_blocks(100);
    r.hold_from(Some(0));
    for op in &log {
        r.apply(op).unwrap();
    }
    assert_eq!(r.pruned_to(), 0);
    for n in c.pruned_to() + 1..=c.head() {
        assert_eq!(r.block(n), c.block(n), "block {n}");
    }
    assert_eq!(r.balance(dest, Some(usdt())), c.balance(dest, Some(usdt())));
    let mut unheld = SimChain::new(c.genesis().clone());
    unheld.set_retain_blocks(100);
    assert!(
        log.iter().try_for_each(|op| unheld.apply(op)).is_err(),
        "without the hold the 300-deep reorg is past the history held"
    );

    // HOLD_LIMIT bounds the hold.
    r.hold_from(Some(1));
    r.mine(HOLD_LIMIT, T0 + 100_000_000, 10);
    assert_eq!(r.pruned_to(), r.head() - HOLD_LIMIT);
}
