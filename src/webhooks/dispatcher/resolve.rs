//! The dispatcher's resolving read: one store snapshot turns candidate deliveries (new
//! events' deliveries, delivery ids, ordered endpoints to advance) into sends, later times
//! and cancels. Whether an open delivery may go is `services::webhook_deliveries::open_delivery`;
//! an ordered endpoint sends only its oldest open delivery.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;
use zeroize::Zeroizing;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{DeliveryMode, DeliveryStatus, WebhookDelivery, WebhookEndpoint};
use appliance_storage::{ReadCtx, ReadOps, StoreError};

use crate::registry::Registry;
use crate::sealing::DataKey;
use crate::services::webhook_deliveries::{open_delivery, OpenDelivery};
use crate::views::{self, delivery_ref};

/// A delivery ready to be sent.
pub(super) struct Job {
    pub id: Uuid,
    pub endpoint: Uuid,
    pub ordered: bool,
    /// The attempt this send is (attempts made so far + 1).
    pub attempt: u32,
    pub url: String,
    /// Live secrets, newest first, opened.
    pub secrets: Vec<Zeroizing<String>>,
    /// The event as `GET /v1/events/{id}` shows it.
    pub event_json: Arc<str>,
}

/// What a read decided about a candidate.
pub(super) enum Resolution {
    Send(Job),
    /// Not due yet.
    Later(Uuid, i64),
    /// Open, but its endpoint is disabled.
    Cancel {
        id: Uuid,
        endpoint: Uuid,
        attempt: u32,
    },
    /// Cannot be sent: its event cannot be decoded from the store, or its endpoint's secret
    /// does not open. Recorded `skipped` with the reason (replayable), so an ordered endpoint
    /// moves on instead of waiting for it for ever.
    Skip {
        id: Uuid,
        endpoint: Uuid,
        ordered: bool,
        attempt: u32,
        reason: &'static str,
    },
}

/// Open deliveries looked at per status when choosing an ordered endpoint's next one.
const HEAD_CANDIDATES: usize = 8;

/// The resolving read (blocking, one snapshot).
pub(super) fn resolve_in(
    r: &ReadCtx,
    reg: &Registry,
    key: &DataKey,
    events: &[(Uuid, u64)],
    mut ids: Vec<Uuid>,
    kicks: &[Uuid],
    now: i64,
) -> Result<Vec<Resolution>, StoreError> {
    for (project, seq) in events {
        let prefix = index::prefix(
            IndexTag::WebhookDeliveriesByEvent,
            *project,
            &[&seq.to_be_bytes()],
        );
        let end = index::prefix_end(&prefix);
        for k in r.index_range(&prefix, &end, 1_000, false)? {
            ids.push(index::id_of(&k));
        }
    }
    let mut seen = HashSet::new();
    ids.retain(|id| seen.insert(*id));
    let mut cx = ResolveCtx {
        r,
        reg,
        key,
        now,
        endpoints: HashMap::new(),
        events: HashMap::new(),
        heads: HashSet::new(),
        out: Vec::new(),
    };
    for id in ids {
        let d = match r.get::<WebhookDelivery>(id) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(StoreError::Corrupt(e)) => {
                tracing::error!(delivery = %delivery_ref(id), error = %e, "a webhook delivery row cannot be decoded; passed over (appliance verify reports it)");
                continue;
            }
            Err(e) => return Err(e),
        };
        if !d.status.is_open() {
            continue;
        }
        let Some(ep) = cx.endpoint(d.endpoint_id)? else {
            continue;
        };
        match open_delivery(&ep) {
            OpenDelivery::Hold => continue,
            OpenDelivery::Cancel => {
                cx.out.push(Resolution::Cancel {
                    id: d.id,
                    endpoint: ep.id,
                    attempt: d.attempt,
                });
                continue;
            }
            OpenDelivery::Send => {}
        }
        if ep.delivery_mode == DeliveryMode::Ordered {
            cx.head(&ep)?;
        } else {
            cx.ready(d, &ep)?;
        }
    }
    for e in kicks {
        if let Some(ep) = cx.endpoint(*e)? {
            if open_delivery(&ep) == OpenDelivery::Send && ep.delivery_mode == DeliveryMode::Ordered
            {
                cx.head(&ep)?;
            }
        }
    }
    Ok(cx.out)
}

/// An event as a delivery needs it.
#[derive(Clone)]
enum EventRead {
    Found(Arc<str>),
    Missing,
    /// The stored row does not decode (reported by `appliance verify`).
    Undecodable,
}

struct ResolveCtx<'r> {
    r: &'r ReadCtx,
    /// Renders deposit events' data (`views::event`).
    reg: &'r Registry,
    key: &'r DataKey,
    now: i64,
    endpoints: HashMap<Uuid, Option<Arc<WebhookEndpoint>>>,
    events: HashMap<(Uuid, u64), EventRead>,
    /// Ordered endpoints already advanced in this read.
    heads: HashSet<Uuid>,
    out: Vec<Resolution>,
}

impl ResolveCtx<'_> {
    fn endpoint(&mut self, id: Uuid) -> Result<Option<Arc<WebhookEndpoint>>, StoreError> {
        if let Some(e) = self.endpoints.get(&id) {
            return Ok(e.clone());
        }
        let e = self.r.get::<WebhookEndpoint>(id)?.map(Arc::new);
        self.endpoints.insert(id, e.clone());
        Ok(e)
    }

    /// The oldest open delivery of an ordered endpoint: only it may go.
    fn head(&mut self, ep: &Arc<WebhookEndpoint>) -> Result<(), StoreError> {
        if !self.heads.insert(ep.id) {
            return Ok(());
        }
        // A few candidates per status, oldest first: a row that cannot be decoded (reported by
        // `appliance verify`) is passed over, so it cannot hold the endpoint up for ever.
        let mut open: Vec<Uuid> = Vec::new();
        for s in [DeliveryStatus::Pending, DeliveryStatus::Failed] {
            let prefix = index::prefix(
                IndexTag::WebhookDeliveriesByEndpointStatus,
                ep.project_id,
                &[ep.id.as_bytes(), s.as_str().as_bytes()],
            );
            let end = index::prefix_end(&prefix);
            for k in self.r.index_range(&prefix, &end, HEAD_CANDIDATES, false)? {
                open.push(index::id_of(&k));
            }
        }
        open.sort();
        for id in open {
            match self.r.get::<WebhookDelivery>(id) {
                Ok(Some(d)) if d.status.is_open() => return self.ready(d, ep),
                Ok(_) => return Ok(()),
                Err(StoreError::Corrupt(e)) => {
                    tracing::error!(delivery = %delivery_ref(id), error = %e, "a webhook delivery row cannot be decoded; passed over (appliance verify reports it)");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends `d` now or schedules it for later.
    fn ready(&mut self, d: WebhookDelivery, ep: &WebhookEndpoint) -> Result<(), StoreError> {
        let at = d.next_attempt_at.unwrap_or(self.now);
        if at > self.now {
            self.out.push(Resolution::Later(d.id, at));
            return Ok(());
        }
        let key = (d.project_id, d.event_sequence);
        let event_read = match self.events.get(&key) {
            Some(e) => e.clone(),
            None => {
                let e = match self.r.event_at(d.project_id, d.event_sequence) {
                    Ok(Some(ev)) => {
                        EventRead::Found(Arc::from(views::event(self.reg, &ev).to_string()))
                    }
                    Ok(None) => EventRead::Missing,
                    Err(StoreError::Corrupt(e)) => {
                        tracing::error!(
                            event_sequence = d.event_sequence,
                            error = %e,
                            "an event row cannot be decoded; its deliveries are skipped (appliance verify reports it)"
                        );
                        EventRead::Undecodable
                    }
                    Err(e) => return Err(e),
                };
                self.events.insert(key, e.clone());
                e
            }
        };
        let skip = |reason: &'static str| Resolution::Skip {
            id: d.id,
            endpoint: ep.id,
            ordered: ep.delivery_mode == DeliveryMode::Ordered,
            attempt: d.attempt,
            reason,
        };
        let event_json = match event_read {
            EventRead::Found(e) => e,
            EventRead::Missing => {
                tracing::error!(delivery = %delivery_ref(d.id), "the event of a delivery is missing");
                return Ok(());
            }
            EventRead::Undecodable => {
                self.out.push(skip(
                    "The event cannot be decoded from the store; appliance verify reports it.",
                ));
                return Ok(());
            }
        };
        let secrets = match self.key.webhook_secrets(ep, self.now) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(endpoint = %ep.id, error = %e, "a webhook endpoint's signing secret does not open; its deliveries are skipped");
                self.out.push(skip(
                    "The endpoint's signing secret cannot be opened with this data key.",
                ));
                return Ok(());
            }
        };
        self.out.push(Resolution::Send(Job {
            id: d.id,
            endpoint: ep.id,
            ordered: ep.delivery_mode == DeliveryMode::Ordered,
            attempt: d.attempt + 1,
            url: ep.url.clone(),
            secrets,
            event_json,
        }));
        Ok(())
    }
}
