//! `GET /v1/chains`.

use axum::http::StatusCode;
use axum::response::Response;

use crate::api::authed::{Authed, ANY};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::ListPage;
use crate::api::json;
use crate::services::chains::{chain_view, effective};
use crate::state::AppState;
use crate::views::Sorted;
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
    responses((status = 200, description = "Every chain listed for the project.", body = ChainList)))]
async fn list_chains(a: Authed<ANY>) -> Result<Response, ApiError> {
    let reg = a.state.registry.clone();
    let chains: Vec<_> = reg
        .chains
        .iter()
        .map(|c| effective(c, &a.caller.project))
        .filter(|e| e.listed)
        .collect();
    let data: Vec<_> = chains.iter().map(|e| Sorted(chain_view(e))).collect();
    Ok(json(StatusCode::OK, &ListPage::new(&data, false, None)))
}

list_schema! {
    ChainList => crate::views::ChainView<'static>;
}
