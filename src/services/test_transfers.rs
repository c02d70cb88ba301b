//! Test mode's transfers to any address the project custodies (DECISIONS.md section 15):
//! `POST /v1/test/transfers` puts an external transfer on the project's simulated chain,
//! and the chain worker reacts to it exactly as to a real one (a customer's deposit, an
//! invoice payment: whatever `Wallet::owner` of the address says). Nothing here credits
//! anything: the watcher does, when it sees the block.

use appliance_chains::evm::{Address, U256};
use appliance_chains::sim::chain::BlockTx;
use appliance_chains::sim::{Inject, Op};
use appliance_storage::records::{AddressOwner, Wallet};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::types::{Amount, AssetSymbol, ChainId};
use crate::services::{sim_sender_bytes, sim_transfer_hash, wallets, Scope};

/// Sender classes a test transfer may claim for its sender (DECISIONS.md section 12,
/// `sender_class`).
pub const SENDER_CLASSES: &[&str] = &["personal", "contract", "exchange", "unknown"];

/// Why a test transfer is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum TestTransferError {
    /// The chain or asset cannot be used, or `decimals` differs.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// A field breaks a rule: 400 `invalid_request`.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `to_address` is not an address the project custodies on that chain: 422
    /// `unknown_address`.
    #[error("{address} is not an address this project custodies on {chain}.")]
    UnknownAddress { chain: String, address: String },
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(TestTransferError);

/// `POST /v1/test/transfers` (DECISIONS.md section 15).
#[derive(utoipa::ToSchema)]
pub struct NewTestTransfer {
    #[schema(value_type = crate::services::types::EvmChainIn)]
    pub chain: ChainId,
    #[schema(value_type = String, min_length = 1)]
    pub asset: AssetSymbol,
    /// Must equal the asset's decimals (as for payouts).
    pub decimals: u64,
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: Amount,
    /// An address the project custodies (a customer's or an invoice's).
    pub to_address: String,
    /// The sender (default: a synthetic one).
    pub from_address: Option<String>,
    /// The class the sender claims (one of [`SENDER_CLASSES`]); the OpenAPI document
    /// leaves it out.
    #[schema(ignore)]
    pub sender_class: Option<String>,
    /// Default true: the transfer is mined and confirmed before the answer.
    #[schema(value_type = Option<bool>)]
    pub confirm: bool,
}

/// The transfer as planned: its chain operation and who receives it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub op: Op,
    pub tx_hash: String,
    pub from_address: String,
    pub to_address: String,
    pub block_number: u64,
    pub owner: AddressOwner,
    /// Confirmations the chain requires: blocks to mine after the transfer's own so it is
    /// final.
    pub required_confirmations: u32,
}

fn parse_address(param: &'static str, s: &str) -> Result<Address, Invalid> {
    appliance_chains::address::parse_evm_address(s)
        .map(Address::from)
        .map_err(|_| {
            Invalid::new(
                param,
                format!("{param} must be an EVM address (0x + 40 hex)."),
            )
        })
}

/// Checks a test transfer and plans its block (`block_number` and `t_ms` from the simulated
/// chain's cursor). Refuses: 400 for the chain, asset, decimals or an address that does not
/// parse; 422 `unknown_address` for an address the project does not custody there.
pub fn plan(
    r: &impl ReadOps,
    s: &Scope,
    req: &NewTestTransfer,
    block_number: u64,
    t_ms: u64,
) -> Result<Planned, TestTransferError> {
    let eff = chains::resolve(&s.reg, &s.project, &req.chain, "chain")?;
    let asset = chains::resolve_asset(&eff, &req.asset, "asset")?;
    chains::check_decimals(asset.asset, req.decimals)?;
    if let Some(c) = &req.sender_class {
        if !SENDER_CLASSES.contains(&c.as_str()) {
            return Err(Invalid::new(
                "sender_class",
                format!("sender_class must be one of {}.", SENDER_CLASSES.join(", ")),
            )
            .into());
        }
    }
    let to = parse_address("to_address", &req.to_address)?;
    let unknown = || TestTransferError::UnknownAddress {
        chain: req.chain.to_string(),
        address: req.to_address.clone(),
    };
    let wid = r
        .unique_get(&wallets::address_key(&req.chain, &req.to_address))?
        .ok_or_else(unknown)?;
    let w = r
        .get::<Wallet>(wid)?
        .filter(|w| w.project_id == s.project.id)
        .ok_or_else(unknown)?;
    let id = appliance_storage::sources::new_id();
    let from = match &req.from_address {
        Some(a) => parse_address("from_address", a)?,
        None => Address::from(sim_sender_bytes(id)),
    };
    let token = if asset.asset.is_native {
        None
    } else {
        Some(
            asset
                .asset
                .contract
                .parse::<Address>()
                .map_err(|_| Fault::invariant("registry token contract does not parse"))?,
        )
    };
    let tx_hash = sim_transfer_hash("transfer", id);
    let hash = crate::services::sim_chain::parse_tx_hash(&tx_hash)
        .ok_or_else(|| Fault::invariant("test transfer hash"))?;
    let op = Op::Block {
        t_ms,
        txs: vec![BlockTx::Injected(Inject {
            hash,
            from,
            to,
            token,
            value: U256::from(req.amount.get()),
        })],
    };
    Ok(Planned {
        op,
        tx_hash,
        from_address: appliance_chains::address::to_checksum(&from.0 .0),
        to_address: w.address.clone(),
        block_number,
        owner: w.owner(),
        required_confirmations: eff.chain.required_confirmations,
    })
}

/// Records the sender class a test transfer claimed for its sender (read by the refund's
/// sender classification in test mode, where a synthetic sender has no history).
pub fn record_sender_class(
    ctx: &mut WriteCtx<'_>,
    chain: &str,
    from_address: &str,
    class: &str,
) -> Result<(), StoreError> {
    ctx.test_sender_set(chain, from_address, class)
}
