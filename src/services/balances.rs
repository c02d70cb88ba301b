//! Balance reports from the ledger (SPEC.md section 2, Balance lists and Treasury), and the
//! on-chain reading of a live wallet that `source=chain|both` compares them with.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use appliance_chains::format_decimal;
use appliance_storage::ledger::{signed_string, AccountKind, Balance};
use std::sync::Arc;

use appliance_storage::records::{Customer, Wallet};
use appliance_storage::{ReadOps, Store, StoreError};

use crate::registry::Registry;
use crate::services::error::{fault_from, Fault};
use crate::services::sim_chain::SimChains;
use crate::services::types::{CustomerId, ProjectId, WalletId};
use crate::views::{Atomic, Decimal, TreasuryLineView, TreasuryView};

#[derive(Default, Clone, Copy)]
struct Pair {
    available: u128,
    locked: u128,
}

// SPEC.md section 2, Balance lists: atomic amounts with their `_decimal` twins. Fields in
// byte order of their names (the order a JSON object of the project keeps, `views`).
/// One (chain, asset) balance. `onchain`, `onchain_decimal` and `drift` only with an
/// on-chain reading (`source=chain|both`).
#[derive(Serialize, ToSchema)]
#[schema(as = Balance)]
pub struct BalanceItem {
    asset: String,
    /// Spendable.
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    available: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    available_decimal: Decimal,
    chain: String,
    decimals: u8,
    /// On-chain balance minus what the ledger expects on the address.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    drift: Option<String>,
    /// Reserved against in-flight payouts.
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    locked: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    locked_decimal: Decimal,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^(0|[1-9][0-9]*)$")]
    onchain: Option<Atomic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    onchain_decimal: Option<Decimal>,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    total: Atomic,
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    total_decimal: Decimal,
}

/// A customer's balances (`object: balance_list`).
#[derive(Serialize, ToSchema)]
pub struct CustomerBalances {
    customer_id: Uuid,
    data: Vec<BalanceItem>,
    #[schema(pattern = "^balance_list$")]
    object: &'static str,
}

/// A wallet's balances (`object: balance_list`).
#[derive(Serialize, ToSchema)]
pub struct WalletBalances {
    data: Vec<BalanceItem>,
    #[schema(pattern = "^balance_list$")]
    object: &'static str,
    /// `ledger`, `chain` or `both`.
    source: String,
    wallet_id: Uuid,
}

fn item(
    reg: &Registry,
    chain: String,
    asset: String,
    p: Pair,
    onchain: Option<(u128, u128)>,
) -> BalanceItem {
    let d = reg.decimals(&chain, &asset);
    let total = p.available.saturating_add(p.locked);
    BalanceItem {
        available: Atomic(p.available),
        available_decimal: Decimal(p.available, d),
        decimals: d,
        drift: onchain.map(|(onchain, expected)| signed_string(onchain, expected)),
        locked: Atomic(p.locked),
        locked_decimal: Decimal(p.locked, d),
        onchain: onchain.map(|(o, _)| Atomic(o)),
        onchain_decimal: onchain.map(|(o, _)| Decimal(o, d)),
        total: Atomic(total),
        total_decimal: Decimal(total, d),
        asset,
        chain,
    }
}

fn customer_pairs(
    r: &impl ReadOps,
    project: Uuid,
    customer: Uuid,
) -> Result<BTreeMap<(String, String), Pair>, StoreError> {
    let mut m: BTreeMap<(String, String), Pair> = BTreeMap::new();
    for (a, b) in r.accounts_of(project, customer)? {
        let e = m.entry((a.chain.clone(), a.asset.clone())).or_default();
        match a.kind {
            AccountKind::Available => e.available = b.credit_balance(),
            AccountKind::Locked => e.locked = b.credit_balance(),
            _ => {}
        }
    }
    Ok(m)
}

/// `GET /v1/customers/{id}/balances`: every (chain, asset) the customer holds.
pub fn customer(
    r: &impl ReadOps,
    reg: &Registry,
    project: Uuid,
    customer: Uuid,
) -> Result<CustomerBalances, StoreError> {
    let data = customer_pairs(r, project, customer)?
        .into_iter()
        .map(|((c, a), p)| item(reg, c, a, p, None))
        .collect();
    Ok(CustomerBalances {
        customer_id: customer,
        data,
        object: "balance_list",
    })
}

/// `GET /v1/wallets/{id}/balances`: every asset of the wallet's chain. With an on-chain
/// reading, `drift` = on-chain balance minus what the ledger expects on the address. Every
/// item keeps `available`, `locked`, `total` and their `_decimal` twins whatever the source
/// (SPEC.md section 2, Balance lists).
pub fn wallet(
    r: &impl ReadOps,
    reg: &Registry,
    w: &Wallet,
    source: &str,
    onchain: impl Fn(&str) -> Result<u128, StoreError>,
) -> Result<WalletBalances, StoreError> {
    let pairs = customer_pairs(r, w.project_id, w.customer_id)?;
    let mut data = Vec::new();
    if let Some(chain) = reg.chain(&w.chain) {
        for a in &chain.assets {
            let p = pairs
                .get(&(w.chain.clone(), a.symbol.clone()))
                .copied()
                .unwrap_or_default();
            let reading = if source == "ledger" {
                None
            } else {
                Some((onchain(&a.symbol)?, r.holding(w.id, &a.symbol)?))
            };
            data.push(item(reg, w.chain.clone(), a.symbol.clone(), p, reading));
        }
    }
    Ok(WalletBalances {
        data,
        object: "balance_list",
        source: source.to_string(),
        wallet_id: w.id,
    })
}

/// Why a balance read is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    /// No such customer or wallet in the project: 404 `not_found`.
    #[error("No such {0}.")]
    NotFound(&'static str),
    /// The chain's node cannot be reached now: 503 `chain_unavailable_now`, retryable
    /// (DECISIONS.md section 16: a chain READ with the node down is retryable).
    #[error("The chain's node cannot be reached now; retry later.")]
    ChainUnavailable,
    /// A test project's simulated chain cannot be opened.
    #[error(transparent)]
    Sim(#[from] crate::services::sim_chain::SimOpenError),
    /// A test project's simulated chain failed to answer (500 `internal_error`).
    #[error(transparent)]
    Onchain(#[from] OnchainError),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(BalanceError);

/// Where `GET /v1/wallets/{id}/balances` takes its figures from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalanceSource {
    /// The ledger alone.
    Ledger,
    /// The chain's reading beside the ledger, with `drift`.
    Chain,
    /// Both (the same answer as `Chain`: every item keeps the ledger's figures).
    Both,
}

impl BalanceSource {
    /// The query value (`ledger` | `chain` | `both`).
    pub fn as_str(self) -> &'static str {
        match self {
            BalanceSource::Ledger => "ledger",
            BalanceSource::Chain => "chain",
            BalanceSource::Both => "both",
        }
    }

    /// The source a query value names, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Ledger, Self::Chain, Self::Both]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// `GET /v1/customers/{id}/balances` of the project's customer `id`: `NotFound` for
/// another project's or a missing customer.
pub fn customer_by_id(
    store: &Store,
    reg: &Registry,
    project: ProjectId,
    id: CustomerId,
) -> Result<CustomerBalances, BalanceError> {
    let (project, id) = (project.uuid(), id.uuid());
    store
        .read_now(|r| {
            if r.get_in::<Customer>(project, id)?.is_none() {
                return Ok(None);
            }
            customer(r, reg, project, id).map(Some)
        })?
        .ok_or(BalanceError::NotFound("customer"))
}

/// What a wallet balance read needs beside the request: the store, the registry and,
/// for a test project, its simulated chains.
pub struct BalanceReader<'a> {
    pub store: &'a Store,
    pub reg: &'a Arc<Registry>,
    pub sim: &'a SimChains,
}

impl BalanceReader<'_> {
    /// `GET /v1/wallets/{id}/balances` of the project's wallet `id`. With a chain source
    /// the node (live) or the project's simulated chain (test, EVM chains) is read first,
    /// outside the store snapshot, then reported against the ledger.
    pub async fn wallet(
        &self,
        project: ProjectId,
        livemode: bool,
        id: WalletId,
        source: BalanceSource,
    ) -> Result<WalletBalances, BalanceError> {
        let (project, id) = (project.uuid(), id.uuid());
        let live = if source == BalanceSource::Ledger {
            None
        } else {
            self.chain_reading(project, livemode, id).await?
        };
        let reg = self.reg.clone();
        self.store
            .read(move |r| {
                let Some(w) = r.get_in::<Wallet>(project, id)? else {
                    return Ok(None);
                };
                wallet(r, &reg, &w, source.as_str(), |asset| match &live {
                    Some(m) => Ok(m.get(asset).copied().unwrap_or(0)),
                    None => r.sim_balance(&w.chain, &w.address, asset),
                })
                .map(Some)
            })
            .await?
            .ok_or(BalanceError::NotFound("wallet"))
    }

    /// The chain's balances of wallet `id`'s address: `None` where the simulated chain
    /// keeps them in the store (a test project's non-EVM chain).
    async fn chain_reading(
        &self,
        project: Uuid,
        livemode: bool,
        id: Uuid,
    ) -> Result<Option<BTreeMap<String, u128>>, BalanceError> {
        let w = self
            .store
            .read(move |r| r.get_in::<Wallet>(project, id))
            .await?
            .ok_or(BalanceError::NotFound("wallet"))?;
        if !livemode {
            if !self.reg.chain(&w.chain).is_some_and(|c| c.is_evm()) {
                return Ok(None);
            }
            let h = self
                .sim
                .get(self.store, self.reg, project, &w.chain)
                .await?;
            let read = onchain_via(&h.client, self.reg, &w.chain, &w.address).await;
            return Ok(Some(read?));
        }
        match onchain(self.reg, &w.chain, &w.address).await {
            Ok(m) => Ok(Some(m)),
            Err(e) => {
                let e = appliance_chains::redact::clean_error(&e);
                tracing::warn!(chain = %w.chain, error = %e, "on-chain balance read failed");
                Err(BalanceError::ChainUnavailable)
            }
        }
    }
}

/// [`treasury`] of `project`, read on the blocking pool (it sums every account).
pub async fn treasury_of(
    store: &Store,
    reg: &Arc<Registry>,
    project: ProjectId,
) -> Result<TreasuryView, StoreError> {
    let reg = reg.clone();
    store.read(move |r| treasury(r, &reg, project)).await
}

/// `GET /v1/balances`: the project's treasury report per (chain, asset).
pub fn treasury(
    r: &impl ReadOps,
    reg: &Registry,
    project: ProjectId,
) -> Result<TreasuryView, StoreError> {
    let project = project.uuid();
    let mut m: BTreeMap<(String, String), BTreeMap<AccountKind, Balance>> = BTreeMap::new();
    for (a, b) in r.accounts_of(project, Uuid::nil())? {
        m.entry((a.chain.clone(), a.asset.clone()))
            .or_default()
            .insert(a.kind, b);
    }
    let data = m
        .into_iter()
        .map(|((chain, asset), k)| {
            let get = |kind| k.get(&kind).copied().unwrap_or_default();
            let (dep, transit, treas, recv) = (
                get(AccountKind::Deposits),
                get(AccountKind::InTransit),
                get(AccountKind::Treasury),
                get(AccountKind::Receivable),
            );
            // Assets held, as (debits, credits) sums; the ledger sums to zero per asset, so
            // everything owed (customers' and the project's own available + locked) equals
            // the net of the project-side accounts.
            let held_d = dep
                .debits
                .saturating_add(transit.debits)
                .saturating_add(treas.debits);
            let held_c = dep
                .credits
                .saturating_add(transit.credits)
                .saturating_add(treas.credits);
            let liab_d = held_d.saturating_add(recv.debits);
            let liab_c = held_c.saturating_add(recv.credits);
            let d = reg.decimals(&chain, &asset);
            let held = signed_string(held_d, held_c);
            let liability = signed_string(liab_d, liab_c);
            let surplus =
                signed_string(held_d.saturating_add(liab_c), held_c.saturating_add(liab_d));
            let (deposits, in_transit, treasury) = (
                dep.debit_balance_string(),
                transit.debit_balance_string(),
                treas.debit_balance_string(),
            );
            // SPEC.md section 1, convention 3: every atomic amount has a `_decimal` twin.
            let twin = |atomic: &str| signed_decimal(atomic, d);
            TreasuryLineView {
                decimals: d.into(),
                deposits_decimal: twin(&deposits),
                in_transit_decimal: twin(&in_transit),
                treasury_decimal: twin(&treasury),
                held_decimal: twin(&held),
                liability_decimal: twin(&liability),
                surplus_decimal: twin(&surplus),
                chain,
                asset,
                deposits,
                in_transit,
                treasury,
                held,
                liability,
                surplus,
            }
        })
        .collect();
    Ok(TreasuryView {
        object: "treasury",
        data,
    })
}

/// Why an on-chain balance could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OnchainError {
    /// No live adapter runs for the chain (no `[chains.<id>]` table).
    #[error("no node is configured for {0}")]
    NoNode(String),
    /// The stored address or a token contract does not parse.
    #[error("bad {0}")]
    Bad(&'static str),
    /// The node failed or refused.
    #[error(transparent)]
    Client(#[from] appliance_chains::client::ClientError),
}

/// On-chain balances of `address` for every asset of `chain` (atomic units; a reading over
/// `u128::MAX` saturates), read through the chain's live client, for
/// `GET /v1/wallets/{id}/balances?source=chain|both` (SPEC.md section 4).
pub async fn onchain(
    reg: &Registry,
    chain: &str,
    address: &str,
) -> Result<BTreeMap<String, u128>, OnchainError> {
    let client = reg
        .chain(chain)
        .and_then(|c| c.client())
        .ok_or_else(|| OnchainError::NoNode(chain.to_string()))?;
    onchain_via(client.as_ref(), reg, chain, address).await
}

/// Balances of `address` on `chain` in every asset of the chain, read through `client`
/// (a live chain's node client, or a test project's simulated chain).
pub async fn onchain_via(
    client: &dyn appliance_chains::client::ChainClient,
    reg: &Registry,
    chain: &str,
    address: &str,
) -> Result<BTreeMap<String, u128>, OnchainError> {
    use appliance_chains::client::AssetRef;
    use appliance_chains::evm::Address;
    let c = reg
        .chain(chain)
        .ok_or_else(|| OnchainError::NoNode(chain.to_string()))?;
    let owner: Address = address.parse().map_err(|_| OnchainError::Bad("address"))?;
    let mut out = BTreeMap::new();
    for a in &c.assets {
        let asset = if a.is_native {
            AssetRef::Native
        } else {
            AssetRef::Token(
                a.contract
                    .parse()
                    .map_err(|_| OnchainError::Bad("contract"))?,
            )
        };
        let v = client.balance(owner, asset).await?;
        out.insert(a.symbol.clone(), u128::try_from(v).unwrap_or(u128::MAX));
    }
    Ok(out)
}

/// A signed atomic integer string (`"-1500000"`) as a decimal string with `decimals` places
/// (`"-1.5"`); exact, no floating point.
fn signed_decimal(atomic: &str, decimals: u8) -> String {
    let (neg, digits) = match atomic.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, atomic),
    };
    let n: u128 = digits.parse().unwrap_or(0);
    let s = format_decimal(n, decimals);
    if neg && n != 0 {
        format!("-{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signed_decimal_keeps_the_sign() {
        assert_eq!(super::signed_decimal("-1500000", 6), "-1.5");
        assert_eq!(super::signed_decimal("1500000", 6), "1.5");
        assert_eq!(super::signed_decimal("0", 18), "0");
        assert_eq!(super::signed_decimal("-0", 6), "0");
    }

    /// A balance item is written as the `json!` tree it was built as before the typed
    /// struct: same keys (the on-chain three only with a reading), same values, same bytes.
    #[test]
    fn items_match_the_reference_tree() {
        use super::*;
        use serde_json::json;
        let reg = Registry::from_config(&crate::config::Config::default());
        for (chain, asset) in [("ethereum", "USDT"), ("ethereum", "ETH"), ("x", "Y")] {
            for onchain in [None, Some((5u128, 7u128)), Some((u128::MAX, 0))] {
                let p = Pair {
                    available: 1_234_567,
                    locked: u128::MAX - 3,
                };
                let d = reg.decimals(chain, asset);
                let total = p.available.saturating_add(p.locked);
                let mut reference = json!({
                    "chain": chain,
                    "asset": asset,
                    "decimals": d,
                    "available": p.available.to_string(),
                    "available_decimal": format_decimal(p.available, d),
                    "locked": p.locked.to_string(),
                    "locked_decimal": format_decimal(p.locked, d),
                    "total": total.to_string(),
                    "total_decimal": format_decimal(total, d),
                });
                if let Some((o, expected)) = onchain {
                    reference["onchain"] = json!(o.to_string());
                    reference["onchain_decimal"] = json!(format_decimal(o, d));
                    reference["drift"] = json!(signed_string(o, expected));
                }
                let typed = item(&reg, chain.into(), asset.into(), p, onchain);
                assert_eq!(
                    serde_json::to_string(&typed).unwrap(),
                    serde_json::to_string(&reference).unwrap()
                );
                let id = Uuid::now_v7();
                let list = CustomerBalances {
                    customer_id: id,
                    data: vec![typed],
                    object: "balance_list",
                };
                assert_eq!(
                    serde_json::to_value(&list).unwrap(),
                    json!({"object": "balance_list", "customer_id": id, "data": [reference]})
                );
            }
        }
    }
}
