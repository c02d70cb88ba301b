//! The event stream (SPEC.md section 4, Events; DECISIONS.md section 7).

use std::convert::Infallible;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::api::authed::{access_rules, Authed};
use crate::api::error::ApiError;
use crate::auth::{Access, ANY_KIND};
use crate::services::types::schema_from_json;
use crate::state::AppState;
use crate::webhooks::{stream, MAX_STREAMS};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(ANY_KIND, "events:read");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream_events))
}

/// A stream frame as `text/event-stream`.
fn sse_frame(f: stream::Frame) -> SseEvent {
    // Field order as before: `id`, `event`, `data`.
    let mut e = SseEvent::default();
    if let Some(id) = f.id {
        e = e.id(id);
    }
    e.event(f.event).data(f.data)
}

/// `GET /v1/events/stream` — `text/event-stream`: `ready` `{cursor, replay_truncated}`, then
/// `event` frames (SSE id = sequence), `ping` every 25 s; closes after 30 minutes.
/// `Last-Event-ID` resumes after that sequence (the last 10 minutes at most). At most 10 open
/// per project (429 `too_many_streams`).
///
/// Any key kind; scope `events:read`.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events",
    params(("Last-Event-ID" = Option<String>, Header, pattern = "^[0-9]{1,19}$", description = "Resume after this frame id (a `sequence`).")),
    responses((status = 200, description = "`text/event-stream`: `ready` once with `{cursor}`, then `event` frames `{id, type, created, livemode, scope, data}` (SSE id = sequence), `ping` every 25 s.", content_type = "text/event-stream", body = StreamFrame)))]
async fn stream_events(a: Authed<READ>, headers: HeaderMap) -> Result<Response, ApiError> {
    let last_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u64>())
                .transpose()
                .map_err(|_| {
                    ApiError::invalid(
                        "Last-Event-ID",
                        "Last-Event-ID must be the id of a frame this stream sent.",
                    )
                })?,
        )
        .flatten(),
    };
    let project = a.caller.project.id;
    let slot = a.state.webhooks.open_stream(project).ok_or_else(|| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams",
            format!("At most {MAX_STREAMS} event streams may be open per project."),
        )
        .retry_after(5)
    })?;
    // Subscribe before reading the start, so no commit falls between the two.
    let commits = a.state.store.subscribe();
    let now = appliance_storage::now_us();
    let start = a
        .state
        .store
        .read(move |r| stream::start_point(r, project, last_id, now))
        .await?;
    let (tx, mut rx) = mpsc::channel::<stream::Frame>(64);
    tokio::spawn(stream::produce(
        a.state.handles.clone(),
        a.state.webhooks.clone(),
        project,
        slot,
        commits,
        start,
        tx,
    ));
    let frames = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|f| f.map(|f| Ok::<_, Infallible>(sse_frame(f))))
    });
    let mut resp = Sse::new(frames).into_response();
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

/// An event id: `evt_` + ULID.
pub const EVENT_ID: &str = "^evt_[0-9A-HJKMNP-TV-Z]{26}$";

/// One frame of `GET /v1/events/stream` (`text/event-stream`, DECISIONS.md section 7): the
/// SSE fields `event` (the frame's kind), `id` (the event's `sequence`, for
/// `Last-Event-ID`) and `data` (one line of JSON), by kind.
pub struct StreamFrame;

impl PartialSchema for StreamFrame {
    fn schema() -> RefOr<Schema> {
        let frame = |event: &str, id: bool, data: Value, what: &str| {
            let mut props = json!({
                "event": {"type": "string", "enum": [event]},
                "data": data,
            });
            let mut required = vec!["event", "data"];
            if id {
                props["id"] = json!({"type": "string", "pattern": "^[0-9]{1,19}$", "description": "The event's `sequence`."});
                required.push("id");
            }
            json!({"type": "object", "title": event, "description": what, "properties": props, "required": required})
        };
        let ts = json!({"type": "string", "format": "date-time"});
        schema_from_json(json!({
            "description": "A frame of the event stream: `ready` once, then `event` and `billing` frames as they happen, `ping` every 25 s. New frame kinds and fields can appear.",
            "oneOf": [
                frame("ready", false, json!({
                    "type": "object",
                    "properties": {
                        "cursor": {"type": "integer", "minimum": 0, "description": "The newest sequence when the stream opened."},
                        "replay_truncated": {"type": "boolean", "description": "`Last-Event-ID` asked for more than the 10 minutes kept."},
                    },
                    "required": ["cursor", "replay_truncated"],
                }), "The first frame."),
                frame("event", true, json!({
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "pattern": EVENT_ID},
                        "type": {"type": "string", "description": "The event type, e.g. `deposit.confirmed`; new types can appear."},
                        "created": ts,
                        "livemode": {"type": "boolean"},
                        "scope": {"type": "string", "description": "`account`."},
                        "data": {"type": "object", "description": "The resource as its REST read returns it."},
                    },
                    "required": ["id", "type", "created", "livemode", "scope", "data"],
                }), "An event of the project."),
                frame("billing", true, json!({"type": "object", "description": "A line of the operational balance's journal."}), "A billing line."),
                frame("ping", false, json!({
                    "type": "object",
                    "properties": {"time": ts},
                    "required": ["time"],
                }), "Keeps the connection open."),
            ],
        }))
    }
}
impl ToSchema for StreamFrame {}
