//! State-machine tests of the services against a real store in a temp dir: payout, deposit
//! and sweep lifecycles, with the ledger checked after every step.

use std::sync::Arc;

use uuid::Uuid;

use appliance_storage::ledger::{Account, AccountKind};
use appliance_storage::records::{
    Deposit, DepositStatus, Mode, Payout, PayoutStatus, Project, Sweep, SweepStatus,
};
use appliance_storage::{ReadOps, Store, StoreOptions, WriteCtx, WriteError};

use crate::api::error::ApiError;
use crate::config::Config;
use crate::registry::Registry;
use crate::services::deposits::DepositError;
use crate::services::payouts::PayoutError;
use crate::services::types::Amount;
use crate::services::{customers, deposits, payouts, projects, sweeps, wallets, Scope};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    scope: Scope,
    customer: Uuid,
    /// Height of the ideal chain [`mine`] drives.
    height: std::sync::Mutex<u64>,
}

/// Runs a service call in one transaction; a store failure fails the test, a refusal is
/// returned as the service's own error.
fn write<T: Send + 'static, E: Send + 'static>(
    f: &Fixture,
    op: impl for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>, &Scope) -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    let s = f.scope.clone();
    f.store
        .write_blocking(move |ctx| op(ctx, &s))
        .map_err(|e| match e {
            WriteError::Rejected(e) => e,
            WriteError::Store(s) => panic!("store failed: {s}"),
        })
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let project: Project = store
        .write_blocking(|ctx| projects::create(ctx, "t", Mode::Test))
        .unwrap();
    let reg = Registry::from_config(&Config::default());
    reg.set_data_key(crate::sealing::DataKey::from_bytes([3; 32]));
    let scope = Scope {
        reg: Arc::new(reg),
        project: Arc::new(project),
        delivery_attempts: Config::default().webhooks.max_attempts(),
    };
    let s = scope.clone();
    let customer = store
        .write_blocking(move |ctx| {
            let (c, _) = customers::create(
                ctx,
                &s,
                customers::NewCustomer {
                    reference_id: None,
                    email: None,
                    metadata: None,
                },
            )?;
            wallets::get_or_create(ctx, &s, c.id.into(), "ethereum")?;
            Ok::<_, ApiError>(c.id)
        })
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        scope,
        customer,
        height: std::sync::Mutex::new(0),
    }
}

fn deposit(f: &Fixture, amount: u128, confirm: bool) -> Deposit {
    let c = f.customer;
    write(f, move |ctx, s| {
        deposits::create_test(
            ctx,
            s,
            deposits::TestDeposit {
                customer_id: c.into(),
                chain: "ethereum".into(),
                asset: "USDT".into(),
                decimals: 6,
                amount: Amount::new(amount).expect("a positive amount"),
                confirm,
                block_number: deposits::sim_height(ctx, "ethereum")?,
                block_time_us: ctx.now_us(),
                minted: deposits::Minted::fresh(),
            },
        )
    })
    .unwrap()
}

fn balance(f: &Fixture, customer: Uuid, kind: AccountKind) -> u128 {
    let p = f.scope.project.id;
    f.store
        .read_blocking(move |r| {
            r.balance(&Account::customer(p, customer, "ethereum", "USDT", kind))
        })
        .unwrap()
        .credit_balance()
}

/// Mines `count` blocks of an ideal chain, one transaction each, driving the sent-path
/// steps the chain worker takes: what is queued (payouts) or open (sweeps) is signed and
/// submitted in the next block; a submitted send settles once the asset's confirmations are
/// mined on top of it, or fails (reverted) in the block after it was submitted when its
/// destination ends in `fa11` (the simulated chain's rejecting recipient).
fn mine(f: &Fixture, count: u64) {
    use appliance_storage::index::{self, IndexTag};
    for _ in 0..count {
        let h = {
            let mut h = f.height.lock().unwrap();
            *h += 1;
            *h
        };
        let s = f.scope.clone();
        f.store
            .write_blocking(move |ctx| {
                let required = s.reg.chain("ethereum").unwrap().required_confirmations as u64;
                let ids = |ctx: &WriteCtx<'_>, tag| {
                    ctx.scan_ids(
                        &index::prefix(tag, Uuid::nil(), &[]),
                        None,
                        usize::MAX,
                        |_| Ok(true),
                    )
                    .map(|p| p.items)
                };
                for id in ids(ctx, IndexTag::SweepsWork)? {
                    let Some(sw) = ctx.get::<Sweep>(id)? else {
                        continue;
                    };
                    let hash = crate::services::sim_tx_hash("sweep", id);
                    match sw.status {
                        SweepStatus::Open => {
                            sweeps::submit_sent(ctx, &s, id.into(), &hash, h)?;
                        }
                        SweepStatus::Submitted
                            if h >= sw.submitted_block.unwrap_or(0) + required =>
                        {
                            sweeps::settle_sent(ctx, &s, id.into(), true)?;
                        }
                        _ => {}
                    }
                }
                for id in ids(ctx, IndexTag::PayoutsWork)? {
                    let Some(p) = ctx.get::<Payout>(id)? else {
                        continue;
                    };
                    let hash = crate::services::sim_tx_hash("payout", id);
                    let sub = p.submitted_block.unwrap_or(0);
                    match p.status {
                        PayoutStatus::Queued => {
                            payouts::begin_signing(ctx, &s, id.into())?;
                            payouts::submit_sent(ctx, &s, id.into(), &hash, h)?;
                        }
                        PayoutStatus::Signing => {
                            payouts::submit_sent(ctx, &s, id.into(), &hash, h)?;
                        }
                        PayoutStatus::Submitted if p.to_address.ends_with("fa11") && h > sub => {
                            payouts::settle_sent(ctx, &s, id.into(), &hash, false)?;
                        }
                        PayoutStatus::Submitted if h >= sub + required => {
                            payouts::settle_sent(ctx, &s, id.into(), &hash, true)?;
                        }
                        _ => {}
                    }
                }
                Ok::<_, crate::services::error::Fault>(())
            })
            .unwrap();
    }
}

fn verify_clean(f: &Fixture) {
    let rep = f
        .store
        .read_blocking(appliance_storage::verify::verify)
        .unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}

fn new_payout(f: &Fixture, amount: u128, to: &str) -> Result<Payout, PayoutError> {
    let (c, to) = (f.customer, to.to_string());
    write(f, move |ctx, s| {
        payouts::create(
            ctx,
            s,
            Uuid::now_v7().into(),
            payouts::NewPayout {
                customer_id: Some(c.into()),
                chain: "ethereum".into(),
                asset: "USDT".into(),
                decimals: 6,
                amount: Amount::new(amount).expect("a positive amount"),
                to_address: to,
                reference: None,
                memo: None,
                usd_rate: None,
            },
        )
    })
}

fn get<R: appliance_storage::records::Row + Send + 'static>(f: &Fixture, id: Uuid) -> R {
    f.store
        .read_blocking(move |r| r.get::<R>(id))
        .unwrap()
        .unwrap()
}

const DEST: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

#[test]
fn payout_walks_to_confirmed_and_settles_the_lock() {
    let f = fixture();
    deposit(&f, 5_000_000, true);
    let p = new_payout(&f, 2_000_000, DEST).unwrap();
    assert_eq!(p.status, PayoutStatus::Queued);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 3_000_000);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 2_000_000);
    mine(&f, 1);
    let p1: Payout = get(&f, p.id);
    assert_eq!(p1.status, PayoutStatus::Submitted);
    assert!(p1.tx_hash.is_some());
    mine(&f, 11);
    assert_eq!(
        get::<Payout>(&f, p.id).status,
        PayoutStatus::Submitted,
        "12 confirmations not yet reached"
    );
    mine(&f, 1);
    assert_eq!(get::<Payout>(&f, p.id).status, PayoutStatus::Confirmed);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 0);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 3_000_000);
    verify_clean(&f);
}

fn events_of(f: &Fixture, ty: &str, id: Uuid) -> usize {
    let (p, ty) = (f.scope.project.id, ty.to_string());
    f.store
        .read_blocking(move |r| r.list_events(p, &[ty], Some(&id.to_string()), None, 100, true))
        .unwrap()
        .items
        .len()
}

/// The chain worker's steps of a payout (DECISIONS.md section 16): a new
/// hash emits `payout.submitted` again, `payout.confirmed` fires once, and the status never
/// moves back whatever the sender reports afterwards.
#[test]
fn a_sent_payout_follows_new_hashes_confirms_once_and_never_moves_back() {
    let f = fixture();
    deposit(&f, 5_000_000, true);
    let id = new_payout(&f, 2_000_000, DEST).unwrap().id;
    write(&f, move |ctx, s| payouts::begin_signing(ctx, s, id.into())).unwrap();
    let p = write(&f, move |ctx, s| {
        payouts::submit_sent(ctx, s, id.into(), "0xaa", 1)
    })
    .unwrap();
    assert_eq!(p.unwrap().status, PayoutStatus::Submitted);
    assert_eq!(events_of(&f, "payout.submitted", id), 1);
    // A re-planned send: new hash, payout.submitted again; the same hash again is no event.
    write(&f, move |ctx, s| {
        payouts::follow_hash(ctx, s, id.into(), "0xbb")
    })
    .unwrap();
    write(&f, move |ctx, s| {
        payouts::follow_hash(ctx, s, id.into(), "0xbb")
    })
    .unwrap();
    assert_eq!(events_of(&f, "payout.submitted", id), 2);
    assert_eq!(get::<Payout>(&f, id).tx_hash.as_deref(), Some("0xbb"));
    write(&f, move |ctx, s| {
        payouts::settle_sent(ctx, s, id.into(), "0xbb", true)
    })
    .unwrap();
    assert_eq!(get::<Payout>(&f, id).status, PayoutStatus::Confirmed);
    // Whatever comes later (a reorg re-mined it, a revert, a re-plan), it stays confirmed.
    write(&f, move |ctx, s| {
        payouts::settle_sent(ctx, s, id.into(), "0xbb", true)
    })
    .unwrap();
    write(&f, move |ctx, s| {
        payouts::settle_sent(ctx, s, id.into(), "0xbb", false)
    })
    .unwrap();
    write(&f, move |ctx, s| {
        payouts::fail_replanned(ctx, s, id.into(), "x")
    })
    .unwrap();
    write(&f, move |ctx, s| {
        payouts::fail_unsent(ctx, s, id.into(), "x")
    })
    .unwrap();
    assert!(
        write(&f, move |ctx, s| payouts::begin_signing(ctx, s, id.into()))
            .unwrap()
            .is_none()
    );
    write(&f, move |ctx, s| {
        payouts::follow_hash(ctx, s, id.into(), "0xcc")
    })
    .unwrap();
    let p: Payout = get(&f, id);
    assert_eq!(p.status, PayoutStatus::Confirmed);
    assert_eq!(p.tx_hash.as_deref(), Some("0xcc"), "the hash that paid");
    assert_eq!(events_of(&f, "payout.confirmed", id), 1);
    assert_eq!(events_of(&f, "payout.submitted", id), 2);
    assert_eq!(events_of(&f, "payout.failed", id), 0);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 0);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 3_000_000);
    verify_clean(&f);
}

/// A submitted payout whose nonce a filler took and whose call cannot succeed now fails
/// and unlocks; only a submitted one.
#[test]
fn a_replanned_payout_that_cannot_succeed_fails_and_unlocks() {
    let f = fixture();
    deposit(&f, 5_000_000, true);
    let id = new_payout(&f, 2_000_000, DEST).unwrap().id;
    write(&f, move |ctx, s| {
        payouts::fail_replanned(ctx, s, id.into(), "x")
    })
    .unwrap();
    assert_eq!(
        get::<Payout>(&f, id).status,
        PayoutStatus::Queued,
        "not sent yet"
    );
    write(&f, move |ctx, s| payouts::begin_signing(ctx, s, id.into())).unwrap();
    write(&f, move |ctx, s| {
        payouts::submit_sent(ctx, s, id.into(), "0xaa", 1)
    })
    .unwrap();
    write(&f, move |ctx, s| {
        payouts::fail_replanned(ctx, s, id.into(), "execution reverted: insufficient funds")
    })
    .unwrap();
    let p: Payout = get(&f, id);
    assert_eq!(p.status, PayoutStatus::Failed);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 5_000_000);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 0);
    verify_clean(&f);
}

/// DECISIONS.md section 16: a wallet with an unconfirmed inbound transfer is held from sweeping until
/// the transfer is final (or failed).
#[test]
fn a_wallet_receiving_an_unconfirmed_transfer_is_held_from_sweeping() {
    let f = fixture();
    let receiving = |f: &Fixture, chain: &'static str| {
        f.store
            .read_blocking(move |r| sweeps::wallets_receiving(r, chain))
            .unwrap()
    };
    let d = deposit(&f, 1_000_000, true);
    assert!(
        receiving(&f, "ethereum").is_empty(),
        "confirmed money is final"
    );
    let pending = deposit(&f, 2_000_000, false);
    assert_eq!(
        receiving(&f, "ethereum").into_iter().collect::<Vec<_>>(),
        vec![d.wallet_id]
    );
    assert!(receiving(&f, "bsc").is_empty(), "per chain");
    let id = pending.id;
    write(&f, move |ctx, s| deposits::confirm(ctx, s, id.into())).unwrap();
    assert!(receiving(&f, "ethereum").is_empty());
}

#[test]
fn reverted_payout_fails_and_unlocks() {
    let f = fixture();
    deposit(&f, 1_000_000, true);
    let p = new_payout(&f, 1_000_000, "0x000000000000000000000000000000000000fa11").unwrap();
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 0);
    mine(&f, 2);
    let p: Payout = get(&f, p.id);
    assert_eq!(p.status, PayoutStatus::Failed);
    assert_eq!(p.failure_reason.as_deref(), Some("execution reverted"));
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 1_000_000);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 0);
    verify_clean(&f);
}

#[test]
fn cancel_only_before_signing() {
    let f = fixture();
    deposit(&f, 1_000_000, true);
    let a = new_payout(&f, 400_000, DEST).unwrap();
    let id = a.id;
    let c = write(&f, move |ctx, s| payouts::cancel(ctx, s, id.into())).unwrap();
    assert_eq!(c.status, PayoutStatus::Canceled);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 1_000_000);
    let b = new_payout(&f, 400_000, DEST).unwrap();
    mine(&f, 1);
    let id = b.id;
    let err = write(&f, move |ctx, s| payouts::cancel(ctx, s, id.into())).unwrap_err();
    assert!(matches!(err, PayoutError::NotCancelable { .. }), "{err:?}");
    assert_eq!(ApiError::from(err).code, "payout_not_cancelable");
    verify_clean(&f);
}

#[test]
fn overdraw_is_refused_and_writes_nothing() {
    let f = fixture();
    deposit(&f, 100, true);
    let err = new_payout(&f, 101, DEST).unwrap_err();
    assert!(
        matches!(
            err,
            PayoutError::InsufficientFunds {
                available: 100,
                requested: 101,
                ..
            }
        ),
        "{err:?}"
    );
    let err = ApiError::from(err);
    assert_eq!(err.code, "insufficient_funds");
    assert_eq!(err.status.as_u16(), 402);
    assert_eq!(err.param.as_deref(), Some("amount"));
    assert!(
        err.message.contains("available 0.0001") && err.message.contains("requested 0.000101"),
        "{}",
        err.message
    );
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 100);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 0);
    verify_clean(&f);
}

#[test]
fn orphan_after_spend_posts_the_shortfall_to_receivable() {
    let f = fixture();
    let d = deposit(&f, 1_000, true);
    new_payout(&f, 600, DEST).unwrap();
    let id = d.id;
    let o = write(&f, move |ctx, s| deposits::orphan(ctx, s, id.into())).unwrap();
    assert_eq!(o.status, DepositStatus::Orphaned);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 0);
    assert_eq!(balance(&f, f.customer, AccountKind::Locked), 600);
    let p = f.scope.project.id;
    let recv = f
        .store
        .read_blocking(move |r| {
            r.balance(&Account::project(
                p,
                "ethereum",
                "USDT",
                AccountKind::Receivable,
            ))
        })
        .unwrap();
    assert_eq!(recv.debits - recv.credits, 600);
    verify_clean(&f);
}

/// The project's sweeps, newest first (at most 10).
fn sweeps_of(f: &Fixture) -> Vec<Sweep> {
    let p = f.scope.project.id;
    f.store
        .read_blocking(move |r| {
            r.list::<Sweep>(
                &appliance_storage::index::prefix(
                    appliance_storage::index::IndexTag::Sweeps,
                    p,
                    &[],
                ),
                None,
                10,
                |_| true,
            )
        })
        .unwrap()
        .items
}

#[test]
fn sweep_moves_deposits_to_treasury_without_touching_customers() {
    let f = fixture();
    deposit(&f, 7_000, true);
    deposit(&f, 3_000, true);
    let p = f.scope.project.id;
    let proj = |kind| {
        let b = f
            .store
            .read_blocking(move |r| r.balance(&Account::project(p, "ethereum", "USDT", kind)))
            .unwrap();
        b.debits as i128 - b.credits as i128
    };
    assert_eq!(proj(AccountKind::Deposits), 10_000);
    mine(&f, 1);
    assert_eq!(proj(AccountKind::Deposits), 0);
    assert_eq!(proj(AccountKind::InTransit), 10_000);
    mine(&f, 12);
    assert_eq!(proj(AccountKind::InTransit), 0);
    assert_eq!(proj(AccountKind::Treasury), 10_000);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 10_000);
    let sweeps = sweeps_of(&f);
    assert_eq!(
        sweeps.len(),
        1,
        "two deposits before the next block share one sweep"
    );
    assert_eq!(sweeps[0].status, SweepStatus::Confirmed);
    assert_eq!(sweeps[0].amount, 10_000);
    verify_clean(&f);
}

/// The holding row of the fixture customer's ethereum wallet in USDT (amount, open sweep).
fn holding_row(f: &Fixture) -> appliance_storage::ledger::Holding {
    let c = f.customer;
    write(f, move |ctx, s| {
        let (w, _) = wallets::get_or_create(ctx, s, c.into(), "ethereum")?;
        Ok::<_, ApiError>(ctx.holding_of(&w, "USDT")?)
    })
    .unwrap()
}

#[test]
fn a_wallets_open_sweep_is_named_by_its_holding_row_until_it_leaves() {
    // Schema 8: no open-sweep key of its own; the holding row that every credit writes
    // names the sweep, later deposits add to it, and it is released when the sweep is
    // submitted or skipped.
    let f = fixture();
    deposit(&f, 7_000, true);
    let first = sweeps_of(&f);
    assert_eq!(first.len(), 1);
    let h = holding_row(&f);
    assert_eq!((h.amount, h.open_sweep), (7_000, Some(first[0].id)));
    deposit(&f, 3_000, true);
    assert_eq!(sweeps_of(&f).len(), 1, "added to the open sweep");
    assert_eq!(get::<Sweep>(&f, first[0].id).amount, 10_000);
    let h = holding_row(&f);
    assert_eq!((h.amount, h.open_sweep), (10_000, Some(first[0].id)));
    verify_clean(&f);

    mine(&f, 1);
    assert_eq!(get::<Sweep>(&f, first[0].id).status, SweepStatus::Submitted);
    assert_eq!(holding_row(&f), Default::default());
    verify_clean(&f);

    // The next deposit opens another sweep; reorged away, it shrinks to nothing and is
    // skipped at the next block, which releases it too.
    let d = deposit(&f, 5_000, true);
    let second = sweeps_of(&f)
        .into_iter()
        .find(|s| s.status == SweepStatus::Open)
        .expect("a new open sweep");
    assert_ne!(second.id, first[0].id);
    let h = holding_row(&f);
    assert_eq!((h.amount, h.open_sweep), (5_000, Some(second.id)));
    verify_clean(&f);
    let id = d.id;
    write(&f, move |ctx, s| deposits::orphan(ctx, s, id.into())).unwrap();
    assert_eq!(get::<Sweep>(&f, second.id).amount, 0);
    assert_eq!(holding_row(&f).open_sweep, Some(second.id));
    verify_clean(&f);
    mine(&f, 1);
    assert_eq!(get::<Sweep>(&f, second.id).status, SweepStatus::Skipped);
    assert_eq!(holding_row(&f), Default::default());
    verify_clean(&f);
}

#[test]
fn manual_deposit_waits_for_confirm_and_fail_leaves_no_credit() {
    let f = fixture();
    let d = deposit(&f, 500, false);
    assert_eq!(d.status, DepositStatus::Detected);
    mine(&f, 50);
    assert_eq!(get::<Deposit>(&f, d.id).status, DepositStatus::Detected);
    assert_eq!(balance(&f, f.customer, AccountKind::Available), 0);
    let id = d.id;
    let failed = write(&f, move |ctx, s| deposits::fail(ctx, s, id.into())).unwrap();
    assert_eq!(failed.status, DepositStatus::Failed);
    let err = write(&f, move |ctx, s| deposits::confirm(ctx, s, id.into())).unwrap_err();
    assert!(matches!(err, DepositError::InvalidState { .. }), "{err:?}");
    assert_eq!(ApiError::from(err).code, "invalid_state");
    verify_clean(&f);
}

#[test]
fn explicit_sweep_of_an_empty_address_is_skipped() {
    let f = fixture();
    let c = f.customer;
    let w = write(&f, move |ctx, s| {
        wallets::get_or_create(ctx, s, c.into(), "ethereum")
    })
    .unwrap()
    .0;
    let sw = write(&f, move |ctx, s| {
        sweeps::request(ctx, s, w.id.into(), None, |c, chain| {
            deposits::sim_height(c, chain)
        })
    })
    .unwrap();
    assert_eq!(sw.status, SweepStatus::Skipped);
    assert_eq!(sw.skip_reason.as_deref(), Some("nothing_to_sweep"));
}

#[test]
fn a_sweep_read_as_empty_is_not_skipped_once_its_address_holds_funds() {
    // The sender reads a sweep's amount outside the store transaction; a deposit credited
    // before its write must leave the sweep open, not submitted without a transaction.
    let f = fixture();
    deposit(&f, 4_000, true);
    let open = sweeps_of(&f);
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].status, SweepStatus::Open);
    let id = open[0].id;
    let skipped = write(&f, move |ctx, s| sweeps::skip_if_empty(ctx, s, id.into())).unwrap();
    assert!(skipped.is_none(), "{skipped:?}");
    let sw = get::<Sweep>(&f, id);
    assert_eq!(sw.status, SweepStatus::Open);
    assert_eq!(sw.tx_hash, None);
    mine(&f, 1);
    assert_eq!(get::<Sweep>(&f, id).status, SweepStatus::Submitted);
    verify_clean(&f);
}

/// One step of a random merchant workload.
#[derive(Debug, Clone)]
enum Step {
    Deposit(u32, bool),
    Confirm(usize),
    Fail(usize),
    Orphan(usize),
    Payout(u32, bool),
    Cancel(usize),
    Mine(u8),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        (1u32..5_000, any::<bool>()).prop_map(|(a, c)| Step::Deposit(a, c)),
        (0usize..8).prop_map(Step::Confirm),
        (0usize..8).prop_map(Step::Fail),
        (0usize..8).prop_map(Step::Orphan),
        (1u32..5_000, any::<bool>()).prop_map(|(a, r)| Step::Payout(a, r)),
        (0usize..8).prop_map(Step::Cancel),
        (1u8..15).prop_map(Step::Mine),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..Default::default() })]

    /// Whatever the order of deposits, confirmations, failures, orphans, payouts (some
    /// reverting), cancels and blocks, every refusal leaves no trace and `verify` finds the
    /// ledger balanced, summing to zero per asset, with no negative available or locked
    /// balance and holdings matching the deposits account.
    #[test]
    fn random_workloads_keep_every_invariant(steps in proptest::collection::vec(step(), 1..40)) {
        let f = fixture();
        let mut deposits_made: Vec<Uuid> = Vec::new();
        let mut payouts_made: Vec<Uuid> = Vec::new();
        for s in steps {
            let label = format!("{s:?}");
            match s {
                Step::Deposit(a, c) => deposits_made.push(deposit(&f, a as u128, c).id),
                Step::Confirm(i) | Step::Fail(i) | Step::Orphan(i) => {
                    if let Some(id) = deposits_made.get(i).copied() {
                        let _ = write(&f, move |ctx, sc| match s {
                            Step::Confirm(_) => deposits::confirm(ctx, sc, id.into()),
                            Step::Fail(_) => deposits::fail(ctx, sc, id.into()),
                            _ => deposits::orphan(ctx, sc, id.into()),
                        });
                    }
                }
                Step::Payout(a, revert) => {
                    let to = if revert { "0x000000000000000000000000000000000000fa11" } else { DEST };
                    if let Ok(p) = new_payout(&f, a as u128, to) {
                        payouts_made.push(p.id);
                    }
                }
                Step::Cancel(i) => {
                    if let Some(id) = payouts_made.get(i).copied() {
                        let _ = write(&f, move |ctx, sc| payouts::cancel(ctx, sc, id.into()));
                    }
                }
                Step::Mine(n) => mine(&f, n as u64),
            }
            let rep = f.store.read_blocking(appliance_storage::verify::verify).unwrap();
            proptest::prop_assert!(rep.violations.is_empty(), "after {label}: {:?}", rep.violations);
        }
    }
}

/// A native-coin funding transfer confirmed while no price is usable (a registry without a
/// market, as a live server whose cache expired) is marked `awaiting_price`, credits
/// nothing yet, and is credited once, at the price the billing worker then brings.
#[test]
fn a_funding_transfer_without_a_price_waits_for_one_and_is_credited_once() {
    use crate::services::billing;
    use appliance_storage::records::{BillingEntry, EntryKind, Wallet};
    use appliance_storage::ScanOps;
    let f = fixture();
    let p = f.scope.project.id;
    let wallet = write(&f, |ctx, s| {
        billing::ensure_funding_addresses(ctx, s)?;
        let fa = billing::funding_addresses(ctx, s)?
            .into_iter()
            .find(|a| a.chain == "ethereum")
            .expect("an ethereum funding address");
        let w = ctx.get::<Wallet>(fa.id)?.expect("its wallet row");
        Ok::<_, ApiError>(w)
    })
    .unwrap();
    assert!(wallet.is_funding());
    let w = wallet.clone();
    let d_id = write(&f, move |ctx, s| {
        let t = deposits::ChainTransfer {
            chain: "ethereum".into(),
            asset: "ETH".into(),
            amount: 10u128.pow(16),
            tx_hash: format!("0x{}", "ab".repeat(32)),
            log_index: None,
            from_address: DEST.into(),
            block_number: 7,
            block_time: ctx.now_us(),
        };
        deposits::detect(ctx, s, &w, &t, 1, 7)
    })
    .unwrap()
    .expect("detected");
    let entries = |f: &Fixture| {
        f.store
            .read_blocking(move |r| r.all::<BillingEntry>())
            .unwrap()
            .into_iter()
            .filter(|e| e.project_id == p)
            .collect::<Vec<_>>()
    };
    let stored = f
        .store
        .read_blocking(move |r| r.get::<Deposit>(d_id.uuid()))
        .unwrap()
        .unwrap();
    assert!(stored.funding && stored.awaiting_price, "{stored:?}");
    assert_eq!(stored.status, DepositStatus::Confirmed);
    assert!(entries(&f).is_empty(), "credited without a price");
    // The coins are the operator's: not the project's or any customer's.
    let op = f
        .store
        .read_blocking(move |r| {
            r.balance(&Account::project(
                p,
                "ethereum",
                "ETH",
                AccountKind::Operator,
            ))
        })
        .unwrap()
        .credit_balance();
    assert_eq!(op, 10u128.pow(16));
    let waiting = f
        .store
        .read_blocking(|r| Ok(billing::awaiting_price(r, 10).unwrap()))
        .unwrap();
    assert_eq!(waiting, vec![d_id]);
    verify_clean(&f);

    let rate = rust_decimal::Decimal::new(300_000, 2); // 3000.00
    assert!(write(&f, move |ctx, s| billing::credit_awaiting_price(
        ctx, s, d_id, rate, "kraken"
    ))
    .unwrap());
    assert!(!write(&f, move |ctx, s| billing::credit_awaiting_price(
        ctx, s, d_id, rate, "kraken"
    ))
    .unwrap());
    let es = entries(&f);
    assert_eq!(es.len(), 1, "{es:?}");
    assert_eq!(es[0].kind, EntryKind::Funding);
    assert_eq!(es[0].amount_cents, 3_000);
    assert_eq!(es[0].rate.as_deref(), Some("3000.00"));
    assert_eq!(es[0].rate_source.as_deref(), Some("kraken"));
    let waiting = f
        .store
        .read_blocking(|r| Ok(billing::awaiting_price(r, 10).unwrap()))
        .unwrap();
    assert!(waiting.is_empty());
    verify_clean(&f);
}

#[test]
fn simulated_transfer_hashes_are_evm_hashes_keyed_in_the_order_of_their_ids() {
    use appliance_storage::index;
    let ids = [
        Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001),
        Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002),
        Uuid::from_u128(0x0190_0000_0001_7000_8000_0000_0000_0000),
    ];
    let hashes: Vec<String> = ids
        .iter()
        .map(|id| crate::services::sim_transfer_hash("deposit", *id))
        .collect();
    for (id, h) in ids.iter().zip(&hashes) {
        assert_eq!(h.len(), 66, "{h}");
        assert!(
            crate::services::sim_chain::parse_tx_hash(h).is_some(),
            "{h}"
        );
        assert_eq!(h, &h.to_lowercase());
        assert_eq!(&h[2..34], hex::encode(id.as_bytes()));
        assert_eq!(
            &h[34..],
            &crate::services::sim_tx_hash("deposit", *id)[2..34],
            "the rest is derived from the id"
        );
        // An EVM hash: the transfer key starts with its first 16 bytes (25-byte key).
        let k = index::transfer_key("ethereum", h, 0);
        assert_eq!(k.len(), 25);
        assert_eq!(&k[1..17], id.as_bytes());
    }
    assert_ne!(
        crate::services::sim_transfer_hash("transfer", ids[0]),
        hashes[0]
    );
    let keys: Vec<Vec<u8>> = hashes
        .iter()
        .map(|h| index::transfer_key("ethereum", h, 0))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys follow the ids");
}

/// The event-type index keys every type by a 4-byte hash of its name (schema 12; its runs
/// since schema 13): no two types of the catalog share one, so a list by type reads only
/// its own events.
#[test]
fn every_event_type_has_its_own_index_range() {
    let p = uuid::Uuid::now_v7();
    let prefixes: std::collections::BTreeSet<[u8; 20]> = super::EVENT_CATALOG
        .iter()
        .map(|t| appliance_storage::event_runs::type_prefix(p, t))
        .collect();
    assert_eq!(prefixes.len(), super::EVENT_CATALOG.len());
}

/// A 40.00 USD invoice under `refund` (USDT on ethereum at par) overpaid by `excess`
/// atomic units: the project's own `available` credited with the payment (from the
/// treasury, standing in for the payment's credit), the excess held in `locked` by one
/// claim awaiting an address, classified `personal` with a network fee of 1,000 (0.001
/// USDT). Returns the invoice's id.
fn overpaid_invoice(f: &Fixture, excess: u128) -> Uuid {
    use appliance_storage::ledger::{JournalEntry, Posting};
    use appliance_storage::records::{
        Invoice, InvoiceQuote, InvoiceRefund, InvoiceStatus, OverpaymentPolicy,
    };
    write(f, move |ctx, s| {
        let p = s.project.id;
        let now = ctx.now_us();
        let id = Uuid::now_v7();
        let acct = |k| Account::project(p, "ethereum", "USDT", k);
        let entry = |kind: &str, from, to, amount| JournalEntry {
            id: Uuid::now_v7(),
            project_id: p,
            kind: kind.into(),
            ref_id: id,
            created_at: now,
            postings: vec![
                Posting::debit(acct(from), amount),
                Posting::credit(acct(to), amount),
            ],
        };
        ctx.post(&entry(
            "test_payment",
            AccountKind::Treasury,
            AccountKind::Available,
            40_000_000 + excess,
        ))??;
        ctx.post(&entry(
            "invoice_refund_hold",
            AccountKind::Available,
            AccountKind::Locked,
            excess,
        ))??;
        let inv = Invoice {
            id,
            project_id: p,
            checkout_token: format!("ck_{}", "t".repeat(43)),
            reference_id: None,
            title: None,
            description: None,
            price_cents: 4000,
            price_currency: "USD".into(),
            status: InvoiceStatus::Overpaid,
            fee_bps: 0,
            fee_fixed_cents: 0,
            fee_cap_cents: 0,
            metadata: serde_json::json!({}),
            return_url: None,
            cancel_url: None,
            overpayment_policy: OverpaymentPolicy::Refund,
            addresses: Vec::new(),
            quotes: vec![InvoiceQuote {
                chain: "ethereum".into(),
                asset: "USDT".into(),
                contract: String::new(),
                decimals: 6,
                amount_atomic: 40_000_000,
                rate: "1.00".into(),
                rate_source: "par".into(),
            }],
            received: Vec::new(),
            received_cents: 4000 + (excess / 10_000) as u64,
            excess_cents: (excess / 10_000) as u64,
            pending_payments: 0,
            extensions: 0,
            refunds: vec![InvoiceRefund {
                status: appliance_storage::records::RefundStatus::AwaitingAddress,
                skip_reason: None,
                chain: "ethereum".into(),
                asset: "USDT".into(),
                amount_atomic: excess,
                payment_id: Uuid::now_v7(),
                from_address: DEST.to_ascii_lowercase(),
                to_address: None,
                payout_id: None,
                sender_class: Some("personal".into()),
                fee_atomic: Some(1_000),
                failed_payouts: Vec::new(),
            }],
            selected: None,
            expires_at: now + 3_600_000_000,
            paid_at: Some(now),
            canceled_at: None,
            expired_at: None,
            created_at: now,
            updated_at: now,
        };
        ctx.put(&inv)?;
        Ok::<_, crate::services::error::Fault>(id)
    })
    .unwrap()
}

fn invoice_of(f: &Fixture, id: Uuid) -> appliance_storage::records::Invoice {
    get(f, id)
}

fn request_refund(
    f: &Fixture,
    id: Uuid,
    to: &str,
) -> Result<(), crate::services::checkout::CheckoutError> {
    let to = to.to_string();
    write(f, move |ctx, s| {
        crate::services::checkout::request_refund(ctx, s, id.into(), &to)
    })
}

/// A refund whose payout is canceled, fails or is undone by a reorg returns to
/// `awaiting_address` with its net held again, and is asked for again with a new payout
/// (DECISIONS.md section 5); a payout that a later reorg lets
/// succeed after all takes the claim back. The ledger is verified after every step
/// (`verify` checks the project's own `locked` against the claims).
#[test]
fn a_refund_whose_payout_does_not_pay_awaits_an_address_again() {
    let f = fixture();
    let nil = Uuid::nil();
    let (excess, net) = (20_000_000u128, 19_999_000u128);
    let inv = overpaid_invoice(&f, excess);
    verify_clean(&f);
    assert_eq!(balance(&f, nil, AccountKind::Locked), excess);

    // Asked for, then canceled by the merchant before it is sent.
    request_refund(&f, inv, DEST).unwrap();
    let c = &invoice_of(&f, inv).refunds[0];
    assert_eq!(c.status.as_str(), "pending");
    let first = c.payout_id.unwrap();
    assert_eq!(get::<Payout>(&f, first).amount, net);
    // The fee part is the merchant's at the first request.
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    assert_eq!(balance(&f, nil, AccountKind::Locked), net);
    verify_clean(&f);
    write(&f, move |ctx, s| payouts::cancel(ctx, s, first.into())).unwrap();
    let c = invoice_of(&f, inv).refunds[0].clone();
    assert_eq!(c.status.as_str(), "awaiting_address");
    assert_eq!((c.payout_id, c.to_address.as_deref()), (None, None));
    assert_eq!(c.failed_payouts, vec![first]);
    assert_eq!(c.held_atomic(), net);
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    assert_eq!(balance(&f, nil, AccountKind::Locked), net);
    verify_clean(&f);

    // Asked for again, to an address whose transfers revert: failed, awaiting again.
    let reverting = "0x000000000000000000000000000000000000fa11";
    request_refund(&f, inv, reverting).unwrap();
    let second = invoice_of(&f, inv).refunds[0].payout_id.unwrap();
    assert_ne!(second, first);
    assert_eq!(get::<Payout>(&f, second).amount, net, "no second fee");
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    mine(&f, 3);
    assert_eq!(get::<Payout>(&f, second).status, PayoutStatus::Failed);
    let c = invoice_of(&f, inv).refunds[0].clone();
    assert_eq!(c.status.as_str(), "awaiting_address");
    assert_eq!(c.failed_payouts, vec![first, second]);
    assert_eq!(balance(&f, nil, AccountKind::Locked), net);
    verify_clean(&f);

    // A third time, to a good address: sent and confirmed, `invoice.refunded` once.
    request_refund(&f, inv, DEST).unwrap();
    let third = invoice_of(&f, inv).refunds[0].payout_id.unwrap();
    mine(&f, 14);
    assert_eq!(get::<Payout>(&f, third).status, PayoutStatus::Confirmed);
    assert_eq!(invoice_of(&f, inv).refunds[0].status.as_str(), "confirmed");
    assert_eq!(events_of(&f, "invoice.refunded", inv), 1);
    assert_eq!(balance(&f, nil, AccountKind::Locked), 0);
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    verify_clean(&f);
    // The same address again is the same request; another is refused.
    request_refund(&f, inv, DEST).unwrap();
    assert!(matches!(
        request_refund(&f, inv, reverting),
        Err(crate::services::checkout::CheckoutError::AddressMismatch)
    ));

    // A reorg undoes the confirmed refund: the claim awaits an address again, its net
    // held (not left in the merchant's `available`).
    write(&f, move |ctx, s| {
        payouts::unsettle(ctx, s, third.into(), "reorged")
    })
    .unwrap();
    let c = invoice_of(&f, inv).refunds[0].clone();
    assert_eq!(c.status.as_str(), "awaiting_address");
    assert_eq!(c.failed_payouts, vec![first, second, third]);
    assert_eq!(balance(&f, nil, AccountKind::Locked), net);
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    verify_clean(&f);
    // A later reorg lets it succeed after all: the claim follows it again, confirmed, its
    // hold paying the resettlement (nothing left owing in `receivable`).
    write(&f, move |ctx, s| {
        payouts::resettle(ctx, s, third.into(), "0xdd")
    })
    .unwrap();
    let c = invoice_of(&f, inv).refunds[0].clone();
    assert_eq!(c.status.as_str(), "confirmed");
    assert_eq!(c.payout_id, Some(third));
    assert_eq!(c.failed_payouts, vec![first, second]);
    assert_eq!(events_of(&f, "invoice.refunded", inv), 2);
    assert_eq!(balance(&f, nil, AccountKind::Locked), 0);
    assert_eq!(balance(&f, nil, AccountKind::Available), 40_000_000 + 1_000);
    let receivable = Account::project(
        f.scope.project.id,
        "ethereum",
        "USDT",
        AccountKind::Receivable,
    );
    let owed = f
        .store
        .read_blocking(move |r| r.balance(&receivable))
        .unwrap();
    assert_eq!(owed.debits, 0, "{owed:?}");
    verify_clean(&f);
}

/// `verify` notices a refund hold that leaked to the merchant's `available`: the claim
/// awaits an address but the project's own `locked` is short of it.
#[test]
fn verify_reports_a_refund_hold_that_is_not_locked() {
    use appliance_storage::ledger::{JournalEntry, Posting};
    let f = fixture();
    let inv = overpaid_invoice(&f, 20_000_000);
    verify_clean(&f);
    write(&f, move |ctx, s| {
        let p = s.project.id;
        ctx.post(&JournalEntry {
            id: Uuid::now_v7(),
            project_id: p,
            kind: "leak".into(),
            ref_id: inv,
            created_at: ctx.now_us(),
            postings: vec![
                Posting::debit(
                    Account::project(p, "ethereum", "USDT", AccountKind::Locked),
                    5_000_000,
                ),
                Posting::credit(
                    Account::project(p, "ethereum", "USDT", AccountKind::Available),
                    5_000_000,
                ),
            ],
        })??;
        Ok::<_, crate::services::error::Fault>(())
    })
    .unwrap();
    let rep = f
        .store
        .read_blocking(appliance_storage::verify::verify)
        .unwrap();
    assert!(
        rep.violations
            .iter()
            .any(|v| v.contains("own locked ethereum USDT holds 15000000")
                && v.contains("hold 20000000")),
        "{:?}",
        rep.violations
    );
}
