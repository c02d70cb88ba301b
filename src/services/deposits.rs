//! Deposits: detection, confirmation (ledger credit), failure and orphaning (reversal).
//! SPEC.md section 3, Deposit; section 4, Test mode.

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{
    Account, AccountKind, Holding, JournalEntry, JournalKind, Posting,
};
use appliance_storage::records::{
    AddressOwner, Customer, Deposit, DepositFailure, DepositStatus, Project, Wallet,
};
use appliance_storage::{ChainStateOps, Delta, ReadOps, StoreError, WriteCtx};

use crate::registry::Registry;
use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault};
use crate::services::types::{Amount, AssetSymbol, ChainId, CustomerId, DepositId};
use crate::services::{
    billing, emit_row, invoices, journal_entry, sim_sender_bytes, sim_transfer_hash, sweeps, Scope,
};

/// Why a deposit request (test mode) is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum DepositError {
    /// No such deposit in the project: 404 `not_found`.
    #[error("No such deposit.")]
    NotFound,
    /// `customer_id` names no customer of the project: 404 `not_found`.
    #[error("No such customer.")]
    CustomerNotFound,
    /// The chain or asset cannot be used.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The customer has no address on the chain: 422 `no_deposit_address`.
    #[error("The customer has no {chain} address yet; create one with POST /v1/wallets.")]
    NoDepositAddress { chain: String },
    /// The credit would overflow a balance: 422 `amount_too_large`.
    #[error("The amount would overflow the balances it credits.")]
    AmountTooLarge,
    /// A transition from the wrong status: 409 `invalid_state`.
    #[error("Only a {required} deposit can be {action}; this one is {}.", .status.as_str())]
    InvalidState {
        required: &'static str,
        action: &'static str,
        status: DepositStatus,
    },
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(DepositError);

/// `POST /v1/test/deposits`.
#[derive(utoipa::ToSchema)]
#[schema(as = NewTestDeposit)]
pub struct TestDeposit {
    #[schema(value_type = Uuid)]
    pub customer_id: CustomerId,
    #[schema(value_type = crate::services::types::ChainIdIn)]
    pub chain: ChainId,
    #[schema(value_type = String, min_length = 1)]
    pub asset: AssetSymbol,
    /// Must equal the asset's decimals, as for payouts.
    #[schema(minimum = 0)]
    pub decimals: u64,
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: Amount,
    /// Credit at once (default true); false leaves it `detected`.
    #[schema(value_type = Option<bool>)]
    pub confirm: bool,
    /// The simulated chain's block that holds the transfer (the caller mines it in the
    /// same transaction, `services::sim_chain`).
    #[schema(ignore)]
    pub block_number: u64,
    /// That block's timestamp, Unix microseconds.
    #[schema(ignore)]
    pub block_time_us: i64,
    /// The simulated transfer's hash and sender ([`Minted::fresh`]).
    #[schema(ignore)]
    pub minted: Minted,
}

/// A test deposit's simulated transfer: its hash and sender (`0x` + 64 hex, and a
/// checksummed address, both derived from a UUIDv7 minted with them:
/// [`sim_transfer_hash`], [`sim_sender_bytes`]), made on the request's task before the store
/// job: two SHA-256 and a keccak were about 6 % of the store writer's instructions per
/// test deposit when made inside it.
///
/// The deposit's own id is minted by the store job ([`create_test`]), like every other
/// row's: ids minted on request tasks reach the writer up to a commit later than the ids
/// it mints meanwhile, so their rows and their events' index runs would land behind the
/// end of their tables and split full leaves in two half-empty ones (schema 14).
#[derive(Debug, Clone)]
pub struct Minted {
    pub tx_hash: String,
    pub from_address: String,
}

impl Minted {
    /// A new transfer hash and sender (from a UUIDv7 of now: the hashes of one batch sort
    /// side by side, [`sim_transfer_hash`]).
    pub fn fresh() -> Minted {
        let seed = appliance_storage::sources::new_id();
        Minted {
            tx_hash: sim_transfer_hash(Self::LABEL, seed),
            from_address: appliance_chains::address::to_checksum(&sim_sender_bytes(seed)),
        }
    }

    /// The label of a test deposit's transfer hash ([`sim_transfer_hash`]).
    pub const LABEL: &'static str = "deposit";
}

/// Whether a transfer that reached an address the customer holds is credited (SPEC.md
/// section 3, Deposit): money that arrived is credited whatever the project's switches say
/// (deposits or payouts switched off, chain paused), except a coin the operator archived
/// (a compromised contract), which is never credited. `Some(reason)`: the deposit fails
/// with that `failure_reason` (`asset_archived`) instead of being credited.
///
/// The one home of this rule: test deposits ([`create_test`], [`confirm`]) and the live
/// watcher ([`count_confirmations`]) all ask here. Overrides count only on a chain the project
/// lists (an unlisted chain's transfer is credited).
pub fn credit_refusal(
    reg: &Registry,
    project: &Project,
    chain: &str,
    asset: &str,
) -> Option<DepositFailure> {
    let archived = chains::resolve(reg, project, chain, "chain")
        .ok()
        .and_then(|e| e.asset(asset).map(|a| a.archived))
        .unwrap_or(false);
    archived.then_some(DepositFailure::AssetArchived)
}

/// A step of a transfer row's life (SPEC.md section 3, Deposit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Movement {
    /// Seen on chain, not final.
    Detected,
    /// Final and credited.
    Confirmed,
    /// Not money after all.
    Failed,
    /// A credited transfer reorged out; its credit reversed.
    Orphaned,
}

/// Tells whoever owns the transfer's address what happened, the one seam that routes a
/// transfer by the owner of the address it reached (`Wallet::owner`, recorded on the row as
/// `invoice_id` or `funding`): a customer's deposit emits `deposit.<movement>`; an invoice
/// payment goes to `services::invoices` (which emits the invoice's events); a transfer to
/// the project's billing funding address goes to `services::billing` (which credits the
/// operational balance at confirmation). For `Detected`, call before the row is first
/// written: the invoice may mark the payment `late`.
pub fn announce(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: &mut Deposit,
    m: Movement,
) -> Result<(), Fault> {
    if d.funding {
        return match m {
            Movement::Detected => Ok(()),
            Movement::Confirmed => billing::funding_confirmed(ctx, s, d),
            Movement::Failed => billing::funding_failed(ctx, s, d),
            Movement::Orphaned => billing::funding_orphaned(ctx, s, d),
        };
    }
    if d.invoice_id.is_some() {
        return match m {
            Movement::Detected => invoices::payment_seen(ctx, s, d),
            Movement::Confirmed => invoices::payment_credited(ctx, s, d),
            Movement::Failed => invoices::payment_failed(ctx, s, d),
            Movement::Orphaned => invoices::payment_orphaned(ctx, s, d),
        };
    }
    let event = match m {
        Movement::Detected => "deposit.detected",
        Movement::Confirmed => "deposit.confirmed",
        Movement::Failed => "deposit.failed",
        Movement::Orphaned => "deposit.orphaned",
    };
    emit_row(ctx, s, event, d)?;
    Ok(())
}

/// Simulated block height of a chain (test mode).
pub fn sim_height(ctx: &impl ChainStateOps, chain: &str) -> Result<u64, StoreError> {
    ctx.sim_height(chain)
}

/// [`sim_height`] of `chain` and the time it was read (µs since the Unix epoch), read on
/// the blocking pool.
pub async fn sim_height_now(
    store: &appliance_storage::Store,
    chain: String,
) -> Result<(u64, i64), StoreError> {
    store
        .read(move |r| Ok((sim_height(r, &chain)?, appliance_storage::now_us())))
        .await
}

/// Whether test mode keeps `chain`'s on-chain balances in the `sim_balances` table: only
/// chains without a simulated chain (keypair chains). An EVM chain's balances are its
/// simulated chain's state (`services::sim_chain`), so its test deposits write no row
/// there (a random leaf per deposit less).
fn keeps_sim_balance(reg: &Registry, chain: &str) -> bool {
    !reg.chain(chain).is_some_and(|c| c.is_evm())
}

/// Writes a detected deposit (and, with `confirm`, its credit) in one transaction.
pub fn create_test(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    req: TestDeposit,
) -> Result<Deposit, DepositError> {
    let p = s.project.id;
    let ukey = index::unique(
        IndexTag::UniqueWallet,
        p,
        &[req.customer_id.as_uuid().as_bytes(), req.chain.as_bytes()],
    );
    let wallet_id = ctx.unique_get(&ukey)?;
    // A wallet key of (project, customer) exists only for a customer of the project
    // (customers are never deleted), so the customer's row is read only without one: same
    // answers in the same order, one row read and decoded less per deposit.
    if wallet_id.is_none() {
        ctx.get_in::<Customer>(p, req.customer_id.uuid())?
            .ok_or(DepositError::CustomerNotFound)?;
    }
    let eff = chains::resolve(&s.reg, &s.project, &req.chain, "chain")?;
    let asset = chains::resolve_asset(&eff, &req.asset, "asset")?;
    chains::check_decimals(asset.asset, req.decimals)?;
    let refusal = credit_refusal(&s.reg, &s.project, &req.chain, &req.asset);
    let wallet_id = wallet_id.ok_or_else(|| DepositError::NoDepositAddress {
        chain: req.chain.to_string(),
    })?;
    let wallet = ctx
        .get::<Wallet>(wallet_id)?
        .ok_or_else(|| Fault::invariant("wallet index points at nothing"))?;
    let keeps = keeps_sim_balance(&s.reg, &req.chain);
    let onchain = if keeps {
        ctx.sim_balance(&req.chain, &wallet.address, &req.asset)?
    } else {
        0
    };
    let held = ctx.holding_of(&wallet, &req.asset)?;
    if onchain.checked_add(req.amount.get()).is_none()
        || held.amount.checked_add(req.amount.get()).is_none()
    {
        return Err(too_large());
    }
    // Through the batch's kept handle (`WriteCtx::sim_height`).
    let height = ctx.sim_height(&req.chain)?;
    let Minted {
        tx_hash,
        from_address,
    } = req.minted;
    let id = appliance_storage::sources::new_id();
    let native = s
        .reg
        .asset(&req.chain, &req.asset)
        .is_some_and(|a| a.is_native);
    let log_index = (!native).then_some(0u32);
    let now = ctx.now_us();
    let mut d = Deposit {
        id,
        project_id: p,
        customer_id: req.customer_id.uuid(),
        invoice_id: None,
        late: false,
        funding: false,
        awaiting_price: false,
        wallet_id: wallet.id,
        chain: req.chain.to_string(),
        asset: req.asset.to_string(),
        amount: req.amount.get(),
        tx_hash,
        log_index: 0,
        from_address,
        to_address: wallet.address.clone(),
        block_number: req.block_number,
        block_time: req.block_time_us,
        confirmations: 0,
        required_confirmations: eff.chain.required_confirmations,
        status: DepositStatus::Detected,
        failure_reason: None,
        ledger_tx_id: None,
        reversal_tx_id: None,
        manual: !req.confirm,
        created_at: now,
        updated_at: now,
    };
    let credit = (req.confirm && refusal.is_none()).then(|| credit_entry(&d, now));
    if let Some(e) = &credit {
        // The posting is the first write: a refusal (overflow) leaves nothing behind.
        ctx.post(e)?.map_err(|_| too_large())?;
    }
    if keeps {
        ctx.sim_balance_add(
            &d.chain,
            &d.to_address,
            &d.asset,
            Delta::Add(req.amount.get()),
        )?;
    }
    // Keyed as the chain watcher keys the same transfer, so it is recognised as known.
    ctx.unique_put(&transfer_key(&d.chain, &d.tx_hash, log_index), d.id)?;
    emit_row(ctx, s, "deposit.detected", &d)?;
    // The row is written once, in its final state of this transaction: a second put would
    // rewrite the row and add then remove its `detected` index entries.
    if let Some(reason) = refusal {
        d = mark_failed(ctx, s, d, reason)?;
    } else if let Some(e) = credit {
        mark_confirmed(ctx, s, &mut d, e.id, height, Known::New(&wallet), held)?;
    } else {
        put_deposit(ctx, &d, Known::New(&wallet))?;
    }
    Ok(d)
}

fn too_large() -> DepositError {
    DepositError::AmountTooLarge
}

/// The ledger account a deposit's credit goes to: the customer's `available` (customer
/// nil for an invoice payment: the project's own), or the project's `operator` account for
/// a transfer to its billing funding address (the operator's money, DECISIONS.md section
/// 13).
fn credited_account(d: &Deposit) -> Account {
    if d.funding {
        return Account::project(d.project_id, &d.chain, &d.asset, AccountKind::Operator);
    }
    Account::customer(
        d.project_id,
        d.customer_id,
        &d.chain,
        &d.asset,
        AccountKind::Available,
    )
}

/// The journal entry crediting a deposit: Dr deposits / Cr [`credited_account`].
fn credit_entry(d: &Deposit, now: i64) -> JournalEntry {
    journal_entry(
        d.project_id,
        JournalKind::DepositCredit,
        d.id,
        now,
        vec![
            Posting::debit(
                Account::project(d.project_id, &d.chain, &d.asset, AccountKind::Deposits),
                d.amount,
            ),
            Posting::credit(credited_account(d), d.amount),
        ],
    )
}

/// After the credit is posted: holdings, status, event, and the sweep that follows.
/// `known`: what the caller read already ([`Known`]); `held`: the address's holding row
/// (amount and open sweep) as the caller read it in this job: it is not read again.
fn mark_confirmed(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: &mut Deposit,
    entry: Uuid,
    height: u64,
    known: Known<'_>,
    held: Holding,
) -> Result<(), Fault> {
    let stored;
    let w = match known {
        Known::New(w) => w,
        Known::Stored => {
            stored = ctx
                .get::<Wallet>(d.wallet_id)?
                .ok_or_else(|| Fault::invariant("deposit of a missing wallet"))?;
            &stored
        }
    };
    ctx.holding_add_from(w, &d.asset, held, Delta::Add(d.amount))?;
    d.status = DepositStatus::Confirmed;
    d.confirmations = d.confirmations.max(d.required_confirmations);
    // Set once, here, and never changed after: the deposit's events name their entry
    // through this row (`DepositState::ledger_tx_id`, schema 14).
    d.ledger_tx_id = Some(entry);
    d.updated_at = ctx.now_us();
    put_deposit(ctx, d, known)?;
    announce(ctx, s, d, Movement::Confirmed)?;
    sweeps::schedule(ctx, w, &d.asset, d.amount, height, held.open_sweep)?;
    Ok(())
}

/// What the caller of a deposit's write already knows, so the store writer does not look
/// it up again (the writer's time per deposit bounds a catch-up).
#[derive(Clone, Copy)]
enum Known<'a> {
    /// A new deposit, not written yet (this transaction's write is its first), to this
    /// wallet (just read; its id is the deposit's `wallet_id`).
    New(&'a Wallet),
    /// A stored deposit.
    Stored,
}

/// Writes a deposit row; a new one without looking up a stored row to replace.
fn put_deposit(ctx: &mut WriteCtx<'_>, d: &Deposit, known: Known<'_>) -> Result<(), StoreError> {
    match known {
        Known::New(_) => ctx.put_replacing(None, d),
        Known::Stored => ctx.put(d),
    }
}

/// The ledger's holding row of the deposit's address in its asset (amount, open sweep).
fn holding_of(ctx: &WriteCtx<'_>, d: &Deposit, known: Known<'_>) -> Result<Holding, StoreError> {
    match known {
        Known::New(w) => {
            debug_assert_eq!(w.id, d.wallet_id);
            ctx.holding_of(w, &d.asset)
        }
        Known::Stored => ctx.holding_row(d.wallet_id, &d.asset),
    }
}

fn load_detected(
    ctx: &WriteCtx<'_>,
    s: &Scope,
    id: DepositId,
    action: &'static str,
) -> Result<Deposit, DepositError> {
    // Invoice payments are the invoice's, funding transfers billing's: not driven through
    // the test deposit endpoints.
    let d = ctx
        .get_in::<Deposit>(s.project.id, id.uuid())?
        .filter(|d| d.invoice_id.is_none() && !d.funding)
        .ok_or(DepositError::NotFound)?;
    if d.status != DepositStatus::Detected {
        return Err(DepositError::InvalidState {
            required: "detected",
            action,
            status: d.status,
        });
    }
    Ok(d)
}

/// `detected` -> `confirmed`, crediting the ledger (archived coins fail instead).
pub fn confirm(ctx: &mut WriteCtx<'_>, s: &Scope, id: DepositId) -> Result<Deposit, DepositError> {
    let mut d = load_detected(ctx, s, id, "confirmed")?;
    if let Some(reason) = credit_refusal(&s.reg, &s.project, &d.chain, &d.asset) {
        return Ok(fail_with(ctx, s, d, reason)?);
    }
    let held = ctx.holding_row(d.wallet_id, &d.asset)?;
    if held.amount.checked_add(d.amount).is_none() {
        return Err(too_large());
    }
    let e = credit_entry(&d, ctx.now_us());
    ctx.post(&e)?.map_err(|_| too_large())?;
    let height = sim_height(ctx, &d.chain)?;
    mark_confirmed(ctx, s, &mut d, e.id, height, Known::Stored, held)?;
    Ok(d)
}

/// `detected` -> `failed`: the transfer was not money.
pub fn fail(ctx: &mut WriteCtx<'_>, s: &Scope, id: DepositId) -> Result<Deposit, DepositError> {
    let d = load_detected(ctx, s, id, "failed")?;
    Ok(fail_with(ctx, s, d, DepositFailure::SimulatedFailure)?)
}

/// Takes a deposit that did not stay from its simulated address's on-chain balance (as far
/// as the balance goes).
fn unfund_sim_address(ctx: &mut WriteCtx<'_>, d: &Deposit) -> Result<(), StoreError> {
    let onchain = ctx.sim_balance(&d.chain, &d.to_address, &d.asset)?;
    let taken = Delta::Sub(onchain.min(d.amount));
    ctx.sim_balance_add(&d.chain, &d.to_address, &d.asset, taken)?;
    Ok(())
}

fn fail_with(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: Deposit,
    reason: DepositFailure,
) -> Result<Deposit, Fault> {
    if keeps_sim_balance(&s.reg, &d.chain) {
        unfund_sim_address(ctx, &d)?;
    }
    mark_failed(ctx, s, d, reason)
}

/// `detected` -> `failed` with `reason` (`deposit.failed`): the one transition of both
/// chains. Test mode first takes the amount off the simulated balance ([`fail_with`]); the
/// live watcher first releases the transfer key after a reorg ([`fail_transfer`]).
fn mark_failed(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    mut d: Deposit,
    reason: DepositFailure,
) -> Result<Deposit, Fault> {
    d.status = DepositStatus::Failed;
    d.failure_reason = Some(reason.as_str().into());
    d.updated_at = ctx.now_us();
    ctx.put(&d)?;
    announce(ctx, s, &mut d, Movement::Failed)?;
    Ok(d)
}

/// `confirmed` -> `orphaned`: the credit is reversed. What the customer already spent is
/// posted to the project's `receivable`; what was already swept comes out of the treasury.
pub fn orphan(ctx: &mut WriteCtx<'_>, s: &Scope, id: DepositId) -> Result<Deposit, DepositError> {
    let p = s.project.id;
    let d = ctx
        .get_in::<Deposit>(p, id.uuid())?
        .filter(|d| d.invoice_id.is_none() && !d.funding)
        .ok_or(DepositError::NotFound)?;
    if d.status != DepositStatus::Confirmed {
        return Err(DepositError::InvalidState {
            required: "confirmed",
            action: "orphaned",
            status: d.status,
        });
    }
    Ok(orphan_inner(ctx, s, d, true)?)
}

/// The reversal shared by test mode (`simulated`: the simulated balance follows) and the
/// live watcher.
fn orphan_inner(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    mut d: Deposit,
    simulated: bool,
) -> Result<Deposit, Fault> {
    let p = d.project_id;
    let credited = credited_account(&d);
    let avail = ctx.balance(&credited)?.credit_balance();
    let from_avail = avail.min(d.amount);
    // Funds not yet swept leave the deposit address; an open sweep shrinks with them.
    let held = ctx.holding(d.wallet_id, &d.asset)?;
    let from_deposits = held.min(d.amount);
    let mut postings = Vec::new();
    if from_avail > 0 {
        postings.push(Posting::debit(credited, from_avail));
    }
    if d.amount > from_avail {
        postings.push(Posting::debit(
            Account::project(p, &d.chain, &d.asset, AccountKind::Receivable),
            d.amount - from_avail,
        ));
    }
    if from_deposits > 0 {
        postings.push(Posting::credit(
            Account::project(p, &d.chain, &d.asset, AccountKind::Deposits),
            from_deposits,
        ));
    }
    if d.amount > from_deposits {
        postings.push(Posting::credit(
            Account::project(p, &d.chain, &d.asset, AccountKind::Treasury),
            d.amount - from_deposits,
        ));
    }
    let e = journal_entry(
        p,
        JournalKind::DepositReversal,
        d.id,
        ctx.now_us(),
        postings,
    );
    ctx.post(&e)??;
    if from_deposits > 0 {
        ctx.holding_add(d.wallet_id, &d.asset, Delta::Sub(from_deposits))?;
        sweeps::shrink_open(ctx, d.wallet_id, &d.asset, from_deposits)?;
    }
    if simulated && keeps_sim_balance(&s.reg, &d.chain) {
        unfund_sim_address(ctx, &d)?;
    }
    d.status = DepositStatus::Orphaned;
    d.reversal_tx_id = Some(e.id);
    d.updated_at = ctx.now_us();
    ctx.put(&d)?;
    announce(ctx, s, &mut d, Movement::Orphaned)?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------
// From what a chain client reports: the chain worker's watcher calls these inside
// its block-batch transaction, whatever the chain behind the client.

/// A transfer the chain watcher saw arriving at a deposit address (the address is its
/// wallet's, which [`detect`] is given).
#[derive(Debug, Clone)]
pub struct ChainTransfer {
    pub chain: String,
    pub asset: String,
    pub amount: u128,
    /// `0x` + 64 lower-case hex.
    pub tx_hash: String,
    /// Token transfers: the log index; native transfers: `None` (stored as 0).
    pub log_index: Option<u32>,
    /// EIP-55 checksummed (`0x` + 40 hex).
    pub from_address: String,
    pub block_number: u64,
    /// Unix microseconds.
    pub block_time: i64,
}

/// Unique key of a detected transfer ([`index::transfer_key`]): of chain, tx hash and log
/// index (native: `u32::MAX`, so a transaction that both sends the coin and emits a token
/// log yields two deposits).
pub fn transfer_key(chain: &str, tx_hash: &str, log_index: Option<u32>) -> Vec<u8> {
    index::transfer_key(chain, tx_hash, log_index.unwrap_or(u32::MAX))
}

/// Records a deposit for a transfer into `wallet` (SPEC.md section 3, Deposit): emits
/// `deposit.detected`, then counts its confirmations at processed height `height` (at
/// least its block), crediting it when they reach `required_confirmations`
/// ([`count_confirmations`]). Unless this (chain, tx hash, log index) is already recorded:
/// `Ok(None)` then, so a rescan after a restart credits nothing twice. Returns the new
/// deposit's id (the deposit itself is not cloned for the caller: a catch-up detects tens
/// of thousands per second).
pub fn detect(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    wallet: &Wallet,
    t: &ChainTransfer,
    required_confirmations: u32,
    height: u64,
) -> Result<Option<DepositId>, Fault> {
    let key = transfer_key(&t.chain, &t.tx_hash, t.log_index);
    if ctx.unique_get(&key)?.is_some() {
        return Ok(None);
    }
    let now = ctx.now_us();
    let (invoice_id, funding) = match wallet.owner() {
        AddressOwner::Customer(_) => (None, false),
        AddressOwner::Invoice(i) => (Some(i), false),
        AddressOwner::Funding(_) => (None, true),
    };
    let mut d = Deposit {
        id: appliance_storage::sources::new_id(),
        project_id: wallet.project_id,
        customer_id: wallet.customer_id,
        invoice_id,
        late: false,
        funding,
        awaiting_price: false,
        wallet_id: wallet.id,
        chain: t.chain.clone(),
        asset: t.asset.clone(),
        amount: t.amount,
        tx_hash: t.tx_hash.clone(),
        log_index: t.log_index.unwrap_or(0),
        from_address: t.from_address.clone(),
        to_address: wallet.address.clone(),
        block_number: t.block_number,
        block_time: t.block_time,
        confirmations: 0,
        required_confirmations,
        status: DepositStatus::Detected,
        failure_reason: None,
        ledger_tx_id: None,
        reversal_tx_id: None,
        manual: false,
        created_at: now,
        updated_at: now,
    };
    ctx.unique_put(&key, d.id)?;
    announce(ctx, s, &mut d, Movement::Detected)?;
    // Written once, with its confirmations at `height` (credited when they reach the
    // threshold): not put as detected and then again in the same transaction.
    let id = d.id;
    count_at(ctx, s, d, height, Known::New(wallet))?;
    Ok(Some(id.into()))
}

/// Updates a detected live deposit's confirmation count at processed height `height` and
/// credits it once the count reaches its threshold. Returns the new status.
pub fn count_confirmations(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: Deposit,
    height: u64,
) -> Result<DepositStatus, Fault> {
    count_at(ctx, s, d, height, Known::Stored)
}

/// [`count_confirmations`] of a deposit the caller knows as `known` ([`Known`]).
fn count_at(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    mut d: Deposit,
    height: u64,
    known: Known<'_>,
) -> Result<DepositStatus, Fault> {
    if d.status != DepositStatus::Detected {
        return Ok(d.status);
    }
    let conf = height.saturating_sub(d.block_number).saturating_add(1);
    let conf = u32::try_from(conf).unwrap_or(u32::MAX);
    if conf < d.required_confirmations {
        if matches!(known, Known::New(_)) || conf != d.confirmations {
            d.confirmations = conf;
            d.updated_at = ctx.now_us();
            put_deposit(ctx, &d, known)?;
        }
        return Ok(d.status);
    }
    if let Some(reason) = credit_refusal(&s.reg, &s.project, &d.chain, &d.asset) {
        return Ok(fail_transfer(ctx, s, d, reason)?.status);
    }
    let held = holding_of(ctx, &d, known)?;
    if held.amount.checked_add(d.amount).is_none() {
        return Ok(fail_transfer(ctx, s, d, DepositFailure::AmountTooLarge)?.status);
    }
    let e = credit_entry(&d, ctx.now_us());
    if ctx.post(&e)?.is_err() {
        return Ok(fail_transfer(ctx, s, d, DepositFailure::AmountTooLarge)?.status);
    }
    // The count at this height (at least the threshold), written once with the credit.
    d.confirmations = conf;
    mark_confirmed(ctx, s, &mut d, e.id, height, known, held)?;
    Ok(d.status)
}

/// `detected` -> `failed` on a live chain (the unique transfer key is released so the same
/// transfer, re-mined on the new canonical chain, is detected again).
pub fn fail_transfer(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: Deposit,
    reason: DepositFailure,
) -> Result<Deposit, Fault> {
    if reason == DepositFailure::Reorg {
        let li = (d.log_index != 0 || !is_native(&s.reg, &d)).then_some(d.log_index);
        ctx.unique_remove(&transfer_key(&d.chain, &d.tx_hash, li))?;
    }
    mark_failed(ctx, s, d, reason)
}

fn is_native(reg: &Registry, d: &Deposit) -> bool {
    reg.asset(&d.chain, &d.asset).is_some_and(|a| a.is_native)
}

/// A live deposit whose block left the canonical chain: `detected` -> `failed`,
/// `confirmed` -> `orphaned` with its credit reversed (SPEC.md section 3, Deposit).
pub fn unwind(ctx: &mut WriteCtx<'_>, s: &Scope, d: Deposit) -> Result<(), Fault> {
    match d.status {
        DepositStatus::Detected => {
            fail_transfer(ctx, s, d, DepositFailure::Reorg)?;
        }
        DepositStatus::Confirmed => {
            let li = (d.log_index != 0 || !is_native(&s.reg, &d)).then_some(d.log_index);
            ctx.unique_remove(&transfer_key(&d.chain, &d.tx_hash, li))?;
            orphan_inner(ctx, s, d, false)?;
        }
        DepositStatus::Failed | DepositStatus::Orphaned => {}
    }
    Ok(())
}

#[cfg(test)]
mod rule_tests {
    use appliance_storage::records::{AssetOverride, ChainOverride, Mode, Project};

    use super::credit_refusal;
    use crate::config::Config;
    use crate::registry::Registry;

    fn project(chains: Vec<ChainOverride>, assets: Vec<AssetOverride>) -> Project {
        let mut p = Project {
            id: uuid::Uuid::now_v7(),
            name: "t".into(),
            mode: Mode::Live,
            settings: Default::default(),
            created_at: 0,
        };
        p.settings.chains = chains;
        p.settings.assets = assets;
        p
    }

    fn asset(archived: Option<bool>, deposits: Option<bool>) -> AssetOverride {
        AssetOverride {
            chain: "ethereum".into(),
            symbol: "USDT".into(),
            deposits_enabled: deposits,
            payouts_enabled: Some(false),
            archived,
        }
    }

    #[test]
    fn credited_whatever_the_switches_say_except_an_archived_coin() {
        let reg = Registry::from_config(&Config::default());
        // No overrides: credited.
        let p = project(vec![], vec![]);
        assert_eq!(credit_refusal(&reg, &p, "ethereum", "USDT"), None);
        // Deposits and payouts switched off, chain paused: still credited.
        let p = project(
            vec![ChainOverride {
                chain: "ethereum".into(),
                status: Some("paused".into()),
                status_note: None,
                deposits_enabled: Some(false),
                payouts_enabled: Some(false),
                listed: None,
            }],
            vec![asset(Some(false), Some(false))],
        );
        assert_eq!(credit_refusal(&reg, &p, "ethereum", "USDT"), None);
        // An archived coin is refused, whatever else is on.
        let p = project(vec![], vec![asset(Some(true), Some(true))]);
        assert_eq!(
            credit_refusal(&reg, &p, "ethereum", "USDT"),
            Some(appliance_storage::records::DepositFailure::AssetArchived)
        );
        // Archiving one coin leaves the others credited.
        assert_eq!(credit_refusal(&reg, &p, "ethereum", "ETH"), None);
        assert_eq!(credit_refusal(&reg, &p, "polygon", "USDT"), None);
    }
}
