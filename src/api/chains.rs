//! `GET /v1/chains`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use crate::api::error::ApiError;
use crate::api::extract::list_json;
use crate::api::json;
use crate::auth::{Access, Caller};
use crate::services::chains::{chain_json, effective};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/chains", get(list_chains))
}

/// `GET /v1/chains` — the chains listed for the project, with decimals and switches
/// (SPEC 2, Chain); any key kind.
async fn list_chains(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Access::any())?;
    let reg = state.registry.clone();
    let data = reg
        .chains
        .iter()
        .map(|c| effective(c, &caller.project))
        .filter(|e| e.listed)
        .map(|e| chain_json(&e))
        .collect();
    Ok(json(StatusCode::OK, &list_json(data, false, None)))
}
