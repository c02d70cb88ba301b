//! Deposit addresses (SPEC.md section 4, Wallets and balances; DECISIONS.md section 9).

use uuid::Uuid;

use appliance_chains::{AccountKind, ChainStatus};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Customer, Wallet};
use appliance_storage::{ReadOps, WriteCtx};

use crate::registry::Registry;
use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault};
use crate::services::types::{CustomerId, WalletId};
use crate::services::{emit_row, utc_day, Scope};

/// Why a new deposit address is refused (statuses and codes: `api::error`). Every variant
/// but `CustomerNotFound`, `Chain`, `QuotaExceeded` and `Fault` is a 422 naming `chain`.
#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    /// `customer_id` names no customer of the project: 404 `not_found`.
    #[error("No such customer.")]
    CustomerNotFound,
    /// The chain is unknown or not enabled.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// Keypair (EOA) chains issue no new addresses: 422 `account_kind_disabled`.
    #[error("New {chain} addresses are not issued: keypair accounts are switched off.")]
    AccountKindDisabled { chain: String },
    /// 422 `chain_not_live_yet`.
    #[error("{chain} is not live yet.")]
    NotLiveYet { chain: String },
    /// The chain's node has not been reached since start: 422 `chain_unavailable`.
    #[error("{chain} is unavailable: {note}")]
    Unavailable { chain: String, note: String },
    /// The chain is paused: 422 `chain_deposits_disabled`.
    #[error("{chain} is paused: {note}")]
    Paused { chain: String, note: String },
    /// The chain's deposits are switched off: 422 `chain_deposits_disabled`.
    #[error("Deposits on {chain} are switched off.")]
    DepositsDisabled { chain: String },
    /// No asset of the chain takes deposits: 422 `asset_deposits_disabled`.
    #[error("Deposits of every asset on {chain} are switched off.")]
    AssetDepositsDisabled { chain: String },
    /// A live project but no master key unlocked: 422 `chain_deposits_disabled`.
    #[error("No master key is unlocked: live addresses are issued once `appliance init` has run.")]
    NoMasterKey,
    /// The daily address cap is reached: 429 `quota_exceeded`, retry at 00:00 UTC.
    #[error("The daily cap of {cap} new addresses is reached; it resets at 00:00 UTC.")]
    QuotaExceeded { cap: u32, retry_after_s: u64 },
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(WalletError);

/// Returns the customer's wallet on `chain`, creating it when absent (`(wallet, created)`).
///
/// An existing wallet is always returned, whatever the switches say. A new one needs the
/// chain to issue addresses: 422 `account_kind_disabled`, `chain_not_live_yet`,
/// `chain_deposits_disabled` or `asset_deposits_disabled` by the level that is off, and
/// is refused past the daily cap (429 `quota_exceeded`); every call is metered.
pub fn get_or_create(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    customer_id: CustomerId,
    chain_id: &str,
) -> Result<(Wallet, bool), WalletError> {
    let address = new_address(s, customer_id);
    get_or_create_at(ctx, s, customer_id, chain_id, address)
}

/// The address a new wallet of `customer_id` gets under `s` ([`factory_for`] the scope's
/// project, then the CREATE2 rule of DECISIONS.md section 9), `None` when no master key is
/// unlocked for a live project. A pure function of the scope and the id: the handler
/// derives it on the request's thread, before the store job, so the store writer does not
/// hash (three keccak-256 per address, with the EIP-55 checksum).
pub fn new_address(s: &Scope, customer_id: CustomerId) -> Option<String> {
    let factory = s.reg.factory_for(&s.project)?;
    Some(appliance_chains::address::deposit_address_under(
        &factory,
        s.project.id,
        customer_id.uuid(),
    ))
}

/// [`get_or_create`] with the new wallet's address derived beforehand by [`new_address`]
/// under the same scope `s` (used only when a wallet is created).
pub fn get_or_create_at(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    customer_id: CustomerId,
    chain_id: &str,
    address: Option<String>,
) -> Result<(Wallet, bool), WalletError> {
    let p = s.project.id;
    let customer = ctx
        .get_in::<Customer>(p, customer_id.uuid())?
        .ok_or(WalletError::CustomerNotFound)?;
    if s.reg.chain(chain_id).is_none() {
        return Err(ChainError::Unknown {
            id: chain_id.to_string(),
            param: "chain",
        }
        .into());
    }
    let ukey = index::unique(
        IndexTag::UniqueWallet,
        p,
        &[customer.id.as_bytes(), chain_id.as_bytes()],
    );
    if let Some(id) = ctx.unique_get(&ukey)? {
        let w = ctx
            .get::<Wallet>(id)?
            .ok_or_else(|| Fault::invariant("wallet index points at nothing"))?;
        // SPEC.md section 8: every address handed out counts against the daily meter, even
        // on a repeat; only NEW addresses are refused when it is full.
        ctx.addresses_issued_incr(p, utc_day(ctx.now_us()))?;
        return Ok((w, false));
    }
    let eff = chains::resolve(&s.reg, &s.project, chain_id, "chain")?;
    let chain = chain_id.to_string();
    if eff.chain.info.account_kind != AccountKind::Contract {
        return Err(WalletError::AccountKindDisabled { chain });
    }
    match eff.status {
        ChainStatus::ComingSoon => return Err(WalletError::NotLiveYet { chain }),
        ChainStatus::Paused if eff.unreached => {
            return Err(WalletError::Unavailable {
                chain,
                note: eff.status_note,
            })
        }
        ChainStatus::Paused => {
            return Err(WalletError::Paused {
                chain,
                note: eff.status_note,
            })
        }
        ChainStatus::Live => {}
    }
    if !eff.deposits_enabled {
        return Err(WalletError::DepositsDisabled { chain });
    }
    if !eff.assets.iter().any(|a| a.deposits_enabled && !a.archived) {
        return Err(WalletError::AssetDepositsDisabled { chain });
    }
    let day = utc_day(ctx.now_us());
    let cap = s.project.settings.addresses_per_day;
    if ctx.addresses_issued(p, day)? >= cap {
        return Err(WalletError::QuotaExceeded {
            cap,
            retry_after_s: seconds_to_midnight(ctx.now_us()),
        });
    }
    let Some(address) = address else {
        return Err(WalletError::NoMasterKey);
    };
    let w = Wallet {
        id: appliance_storage::sources::new_id(),
        project_id: p,
        customer_id: customer.id,
        invoice_id: None,
        chain: chain_id.to_string(),
        role: "customer".into(),
        status: "active".into(),
        address: address.clone(),
        memo: None,
        created_at: ctx.now_us(),
    };
    ctx.addresses_issued_incr(p, day)?;
    ctx.unique_put(&ukey, w.id)?;
    ctx.unique_put(&address_key(chain_id, &address), w.id)?;
    ctx.put(&w)?;
    emit_row(ctx, s, "wallet.created", &w)?;
    crate::services::billing::charge_address_fee(ctx, s, WalletId::of(&w), chain_id)?;
    Ok((w, true))
}

/// Unique key of an issued address on a chain (any project): detects self-payouts and
/// attributes incoming transfers. Laid out as a digest of the address ‖ chain
/// ([`index::address_key`], schema version 16), so one address's keys on every EVM chain
/// share a leaf.
pub fn address_key(chain: &str, address: &str) -> Vec<u8> {
    index::address_key(chain, address)
}

/// The CREATE2 salt of a wallet's forwarder (what a sweep names to deploy and flush it):
/// the project's funding salt for its billing funding address, else the salt of (project,
/// customer or invoice) (DECISIONS.md sections 9, 12 and 13).
pub fn forwarder_salt(w: &Wallet) -> [u8; 32] {
    if w.is_funding() {
        appliance_chains::address::funding_salt(w.project_id)
    } else {
        appliance_chains::address::deposit_salt(w.project_id, w.salt_id())
    }
}

/// Master (omnibus) wallet address of a test project: the CREATE2 address of customer nil.
/// Live projects share the signer's EVM master wallet (`Registry::live_treasury`).
pub fn master_address(project: Uuid) -> String {
    appliance_chains::address::deposit_address(project, Uuid::nil())
}

/// Whether `address` is the live EVM master wallet of `reg` (payouts to it are
/// self-payouts).
pub fn is_live_treasury(reg: &Registry, address: &str) -> bool {
    reg.live_treasury()
        .is_some_and(|t| appliance_chains::address::to_checksum(&t).eq_ignore_ascii_case(address))
}

fn seconds_to_midnight(now_us: i64) -> u64 {
    let day_us = 86_400_000_000i64;
    ((day_us - now_us.rem_euclid(day_us)) / 1_000_000).max(1) as u64
}
