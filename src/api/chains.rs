//! `GET /v1/chains`.

use axum::http::StatusCode;
use axum::response::Response;

use crate::api::authed::{Authed, ANY};
use crate::api::error::ApiError;
use crate::api::extract::list_json;
use crate::api::json;
use crate::api::schemas;
use crate::services::chains::{chain_json, effective};
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_chains))
}

/// The chains listed for the project, with their assets, decimals and switches
/// (SPEC.md section 2, Chain). Never paginated.
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/chains", tag = "meta",
    responses((status = 200, description = "Every chain listed for the project.", body = schemas::ChainList)))]
async fn list_chains(a: Authed<ANY>) -> Result<Response, ApiError> {
    let reg = a.state.registry.clone();
    let data = reg
        .chains
        .iter()
        .map(|c| effective(c, &a.caller.project))
        .filter(|e| e.listed)
        .map(|e| chain_json(&e))
        .collect();
    Ok(json(StatusCode::OK, &list_json(data, false, None)))
}
