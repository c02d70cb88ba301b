//! The chains a project sees and which of their switches are on (SPEC.md section 2, Chain;
//! section 4, Wallets rules and Payouts rule 5).

use appliance_chains::{AccountKind, ChainStatus};
use appliance_storage::records::{Mode, Project};

use crate::registry::{Asset, Chain, Registry};
use crate::views::{ChainAssetView, ChainView, NativeCurrencyView};

/// Why a chain or asset named in a request cannot be used (mapped in `api::error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// Not a chain identifier this server knows: 400 `invalid_request`.
    #[error("Unknown chain {id:?}.")]
    Unknown { id: String, param: &'static str },
    /// A chain the project does not list: 422 `chain_not_enabled`.
    #[error("The chain {id} is not enabled for this project.")]
    NotEnabled { id: String, param: &'static str },
    /// Not an asset of the chain: 400 `unknown_asset` (DECISIONS.md section 6).
    #[error("{symbol:?} is not an asset on {chain}.")]
    UnknownAsset {
        symbol: String,
        chain: String,
        param: &'static str,
    },
    /// The echoed `decimals` differ from the asset's: 400 `decimals_mismatch` (SPEC.md
    /// section 4, Payouts rule 1).
    #[error("decimals is {echoed} but {symbol} uses {decimals} decimals on this chain.")]
    DecimalsMismatch {
        echoed: u64,
        symbol: String,
        decimals: u8,
    },
}

/// An asset with the project's switches applied.
pub struct EffAsset<'a> {
    pub asset: &'a Asset,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub archived: bool,
}

/// A chain with the project's switches applied.
pub struct EffChain<'a> {
    pub chain: &'a Chain,
    pub listed: bool,
    pub status: ChainStatus,
    pub status_note: String,
    /// Paused by the appliance because the chain's node has not been reached yet (new
    /// addresses: 422 `chain_unavailable`).
    pub unreached: bool,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub assets: Vec<EffAsset<'a>>,
}

impl<'a> EffChain<'a> {
    pub fn asset(&self, symbol: &str) -> Option<&EffAsset<'a>> {
        self.assets.iter().find(|a| a.asset.symbol == symbol)
    }
}

pub use crate::registry::AdapterHealth;

/// `status_note` of a configured chain whose node has not been reached yet.
pub const CONNECTING: &str = "Connecting to the node.";

impl EffChain<'_> {
    /// True when a NEW address can be issued on this chain now: listed, `live`, an
    /// account-based (contract) chain, deposits on and at least one asset taking deposits
    /// (the checks of `services::wallets::create`, SPEC.md section 4, Wallets).
    pub fn issues_addresses(&self) -> bool {
        self.listed
            && self.status == ChainStatus::Live
            && self.chain.info.account_kind == AccountKind::Contract
            && self.deposits_enabled
            && self
                .assets
                .iter()
                .any(|a| a.deposits_enabled && !a.archived)
    }
}

/// The effective state of one chain for a project.
pub fn effective<'a>(chain: &'a Chain, project: &Project) -> EffChain<'a> {
    let o = project
        .settings
        .chains
        .iter()
        .find(|c| c.chain == chain.id());
    let keypair = chain.info.account_kind == AccountKind::Eoa;
    let listed = o.and_then(|o| o.listed).unwrap_or(!keypair);
    let health = match project.mode {
        Mode::Live if chain.configured => chain.health(),
        _ => None,
    };
    let (default_status, default_note) = match (project.mode, chain.info.default_status) {
        (_, ChainStatus::ComingSoon) => (
            ChainStatus::ComingSoon,
            "Support for this chain is on the way.",
        ),
        (Mode::Test, _) if !keypair => (ChainStatus::Live, ""),
        (Mode::Test, _) => (
            ChainStatus::Paused,
            "Keypair chains are not simulated in test mode.",
        ),
        (Mode::Live, _) if !chain.configured => {
            (ChainStatus::Paused, "No node is configured for this chain.")
        }
        (Mode::Live, _) => match &health {
            Some(AdapterHealth::Healthy) => (ChainStatus::Live, ""),
            Some(AdapterHealth::Failing(note)) => (ChainStatus::Live, note.as_str()),
            Some(AdapterHealth::Degraded(note)) => (ChainStatus::Live, note.as_str()),
            Some(AdapterHealth::Unreached(note)) => (ChainStatus::Paused, note.as_str()),
            None => (ChainStatus::Paused, CONNECTING),
        },
    };
    let status = o
        .and_then(|o| o.status.as_deref())
        .and_then(ChainStatus::parse)
        .unwrap_or(default_status);
    let status_note = o.and_then(|o| o.status_note.clone()).unwrap_or_else(|| {
        if status == default_status {
            default_note.to_string()
        } else {
            String::new()
        }
    });
    let assets = chain
        .assets
        .iter()
        .map(|a| {
            let ao = project
                .settings
                .assets
                .iter()
                .find(|x| x.chain == chain.id() && x.symbol == a.symbol);
            EffAsset {
                asset: a,
                deposits_enabled: ao.and_then(|x| x.deposits_enabled).unwrap_or(true),
                payouts_enabled: ao.and_then(|x| x.payouts_enabled).unwrap_or(true),
                archived: ao.and_then(|x| x.archived).unwrap_or(false),
            }
        })
        .collect();
    let unreached = status == default_status
        && status == ChainStatus::Paused
        && project.mode == Mode::Live
        && chain.configured
        && !matches!(
            health,
            Some(AdapterHealth::Healthy)
                | Some(AdapterHealth::Degraded(_))
                | Some(AdapterHealth::Failing(_))
        );
    EffChain {
        chain,
        listed,
        status,
        status_note,
        unreached,
        deposits_enabled: o.and_then(|o| o.deposits_enabled).unwrap_or(true),
        payouts_enabled: o.and_then(|o| o.payouts_enabled).unwrap_or(true),
        assets,
    }
}

/// Resolves a chain identifier from a request: 400 when it is not a chain identifier at all,
/// 422 `chain_not_enabled` when the project does not list it.
pub fn resolve<'a>(
    reg: &'a Registry,
    project: &Project,
    id: &str,
    param: &'static str,
) -> Result<EffChain<'a>, ChainError> {
    let chain = reg.chain(id).ok_or_else(|| ChainError::Unknown {
        id: id.to_string(),
        param,
    })?;
    let eff = effective(chain, project);
    if !eff.listed {
        return Err(ChainError::NotEnabled {
            id: id.to_string(),
            param,
        });
    }
    Ok(eff)
}

/// Resolves an asset symbol on a chain: 400 `unknown_asset` (DECISIONS.md section 6).
pub fn resolve_asset<'a, 'b>(
    chain: &'b EffChain<'a>,
    symbol: &str,
    param: &'static str,
) -> Result<&'b EffAsset<'a>, ChainError> {
    chain.asset(symbol).ok_or_else(|| ChainError::UnknownAsset {
        symbol: symbol.to_string(),
        chain: chain.chain.id().to_string(),
        param,
    })
}

/// 400 `decimals_mismatch` reporting both values (SPEC.md section 4, Payouts rule 1).
pub fn check_decimals(asset: &Asset, echoed: u64) -> Result<(), ChainError> {
    if echoed != asset.decimals as u64 {
        return Err(ChainError::DecimalsMismatch {
            echoed,
            symbol: asset.symbol.clone(),
            decimals: asset.decimals,
        });
    }
    Ok(())
}

/// One item of `GET /v1/chains`.
pub fn chain_view<'a>(e: &'a EffChain<'_>) -> ChainView<'a> {
    let c = e.chain;
    ChainView {
        chain: c.id(),
        name: c.info.name,
        network_type: c.info.network_type,
        chain_id: c.info.chain_id,
        native_currency: NativeCurrencyView {
            name: c.info.native.name,
            symbol: c.info.native.symbol,
            decimals: c.info.native.decimals.into(),
        },
        required_confirmations: c.required_confirmations.into(),
        explorer_url: c.info.explorer_url,
        enabled_for_tenant: e.listed,
        account_kind: match c.info.account_kind {
            AccountKind::Contract => "contract",
            AccountKind::Eoa => "eoa",
        },
        status: e.status.as_str(),
        status_note: &e.status_note,
        // A chain that cannot issue an address does not claim deposits.
        deposits_enabled: e.issues_addresses(),
        payouts_enabled: e.payouts_enabled,
        supports_memo: c.info.supports_memo,
        assets: e
            .assets
            .iter()
            .map(|a| ChainAssetView {
                symbol: &a.asset.symbol,
                name: &a.asset.name,
                decimals: a.asset.decimals.into(),
                contract: &a.asset.contract,
                is_native: a.asset.is_native,
                deposits_enabled: a.deposits_enabled && !a.archived,
                payouts_enabled: a.payouts_enabled && !a.archived,
                decimals_differ_from_default: a.asset.decimals_differ_from_default(),
            })
            .collect(),
    }
}
