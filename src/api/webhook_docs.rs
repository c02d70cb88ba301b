//! The `webhooks` section of the OpenAPI document (SPEC.md section 6): one entry per event
//! type of [`EVENT_CATALOG`], each a `POST` of the signed envelope to the merchant's endpoint.
//! The payload is the event as `GET /v1/events/{id}` returns it plus `attempt` and
//! `delivery_id`; `data` is the resource the type is about, as its REST read returns it.

use serde_json::{json, Value};
use utoipa::openapi::{OpenApi as Document, Paths, RefOr, Schema};

use crate::services::EVENT_CATALOG;

/// A webhook delivery id: `whd_` + ULID.
const DELIVERY_ID: &str = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$";

/// The schema component of the resource an event type carries in `data`, when the document
/// describes it; other types carry an object described by their REST read.
fn data_schema(event_type: &str) -> Option<&'static str> {
    match event_type.split('.').next()? {
        "customer" => Some("Customer"),
        "wallet" => Some("Wallet"),
        "deposit" => Some("Deposit"),
        "payout" => Some("Payout"),
        "sweep" => Some("Sweep"),
        "conversion" => Some("Conversion"),
        "invoice" => Some("Invoice"),
        "billing" => Some("Billing"),
        _ => None,
    }
}

fn component_name(event_type: &str) -> String {
    let mut out = String::from("Event_");
    out.push_str(&event_type.replace('.', "_"));
    out
}

/// Adds `WebhookEnvelope` and one `Event_<type>` schema per event type.
pub fn add_event_schemas(doc: &mut Document) {
    let components = doc.components.get_or_insert_with(Default::default);
    let mut add = |name: String, v: Value| {
        let s: Schema = serde_json::from_value(v).expect("a valid schema");
        components.schemas.insert(name, RefOr::T(s));
    };
    add(
        "WebhookEnvelope".into(),
        json!({
            "description": "What a webhook POSTs: the event (as `GET /v1/events/{id}` returns it) plus the delivery's `attempt` and `delivery_id`. Receivers dedupe on `id` and keep a default branch for unknown types.",
            "allOf": [
                {"$ref": "#/components/schemas/Event"},
                {
                    "type": "object",
                    "required": ["attempt", "delivery_id"],
                    "properties": {
                        "attempt": {"type": "integer", "minimum": 1, "description": "Delivery attempt number."},
                        "delivery_id": {"type": "string", "pattern": DELIVERY_ID}
                    }
                }
            ]
        }),
    );
    for t in EVENT_CATALOG {
        let data = match data_schema(t) {
            Some(s) => json!({"$ref": format!("#/components/schemas/{s}")}),
            None => {
                json!({"type": "object", "description": "The resource as its REST read returns it."})
            }
        };
        add(
            component_name(t),
            json!({
                "description": format!("The `{t}` event as delivered."),
                "allOf": [
                    {"$ref": "#/components/schemas/WebhookEnvelope"},
                    {
                        "type": "object",
                        "properties": {
                            "type": {"type": "string", "pattern": format!("^{}$", t.replace('.', "\\."))},
                            "data": data
                        }
                    }
                ]
            }),
        );
    }
}

/// One `POST` per event type.
pub fn webhooks() -> Paths {
    let mut m = serde_json::Map::new();
    for t in EVENT_CATALOG {
        m.insert(
            (*t).to_string(),
            json!({
                "post": {
                    "operationId": format!("webhook_{}", t.replace('.', "_")),
                    "summary": format!("`{t}` delivered to a webhook endpoint"),
                    "description": "Sent to every active endpoint subscribed to this type. Verify `Service-Signature: t=<unix seconds>,v1=<hex>`: HMAC-SHA256 keyed with the whole endpoint secret (`whsec_...`) over `<t>.<raw body>`; during a rotation overlap one `v1=` per live secret. Reject `t` older than 300 s. Success is any 2xx within 10 s; a 410 disables the endpoint; anything else is retried (8 attempts over about 45 hours).",
                    "parameters": [{
                        "name": "Service-Signature",
                        "in": "header",
                        "required": true,
                        "schema": {"type": "string", "pattern": "^t=[0-9]+(,v1=[0-9a-f]{64})+$"}
                    }],
                    "requestBody": {
                        "required": true,
                        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", component_name(t))}}}
                    },
                    "responses": {
                        "2XX": {"description": "Received; the delivery succeeds."},
                        "410": {"description": "Gone: the endpoint is disabled (`disabled_reason: gone`)."}
                    }
                }
            }),
        );
    }
    serde_json::from_value(json!({ "paths": m }))
        .map(|w: Wrapper| w.paths)
        .expect("valid webhook path items")
}

#[derive(serde::Deserialize)]
struct Wrapper {
    paths: Paths,
}
