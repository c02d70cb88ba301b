//! Deployment of the forwarder factory (DECISIONS.md section 9): the factory of a treasury
//! lives at a CREATE2 address under the deterministic deployment proxy, so any chain can
//! get it by one transaction of the treasury to the proxy. This module knows the chain
//! side only: whether the code is there and the transaction that puts it there. Signing,
//! nonce bookkeeping and broadcast are the sender's (`src/workers/chain/sender.rs`).

use super::rpc::{EvmRpc, RpcError};
use super::{sender, sweeper, Address, Bytes, U256};

/// The transaction that deploys the factory of a treasury.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The deterministic deployment proxy ([`crate::address::DEPLOYMENT_PROXY`]).
    pub to: Address,
    /// Always zero.
    pub value: U256,
    /// Salt followed by the factory's init code.
    pub data: Bytes,
    /// Estimated gas with the sender's safety margin.
    pub gas_limit: u64,
}

/// The factory address of `treasury` (CREATE2 under the deployment proxy).
pub fn address_of(treasury: &Address) -> Address {
    Address::from(crate::address::factory_address(&treasury.0 .0))
}

/// Whether the factory's code is on chain at `factory`.
pub async fn is_deployed(rpc: &EvmRpc, factory: Address) -> Result<bool, RpcError> {
    Ok(!rpc.code(factory).await?.is_empty())
}

/// The deployment transaction of the factory of `treasury`, its gas estimated by the node
/// as sent from the treasury.
pub async fn deployment(rpc: &EvmRpc, treasury: Address) -> Result<Deployment, RpcError> {
    let to = Address::from(crate::address::DEPLOYMENT_PROXY);
    let data = sweeper::factory_deploy_calldata(&treasury);
    let gas = rpc
        .estimate_gas(&crate::client::CallRequest {
            from: treasury,
            to,
            value: U256::ZERO,
            data: data.clone(),
        })
        .await?;
    Ok(Deployment {
        to,
        value: U256::ZERO,
        data,
        gas_limit: sender::gas_limit_with_margin(gas),
    })
}
