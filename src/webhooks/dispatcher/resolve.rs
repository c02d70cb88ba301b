//! The dispatcher's resolving read: one store snapshot turns candidate deliveries (new
//! events' deliveries, delivery ids, ordered endpoints to advance) into sends, later times
//! and cancels. Whether an open delivery may go is `services::webhook_deliveries::open_delivery`;
//! an ordered endpoint sends only its oldest open delivery.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{DeliveryMode, DeliveryStatus, WebhookDelivery, WebhookEndpoint};
use appliance_storage::{ReadCtx, ReadOps, StoreError};

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
    /// Live secrets, newest first.
    pub secrets: Vec<String>,
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
}

/// The resolving read (blocking, one snapshot).
pub(super) fn resolve_in(
    r: &ReadCtx,
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
        now,
        endpoints: HashMap::new(),
        events: HashMap::new(),
        heads: HashSet::new(),
        out: Vec::new(),
    };
    for id in ids {
        let Some(d) = r.get::<WebhookDelivery>(id)? else {
            continue;
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

struct ResolveCtx<'r> {
    r: &'r ReadCtx,
    now: i64,
    endpoints: HashMap<Uuid, Option<Arc<WebhookEndpoint>>>,
    events: HashMap<(Uuid, u64), Option<Arc<str>>>,
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
        let mut first: Option<Uuid> = None;
        for s in [DeliveryStatus::Pending, DeliveryStatus::Failed] {
            let prefix = index::prefix(
                IndexTag::WebhookDeliveriesByEndpointStatus,
                ep.project_id,
                &[ep.id.as_bytes(), s.as_str().as_bytes()],
            );
            let end = index::prefix_end(&prefix);
            if let Some(k) = self.r.index_range(&prefix, &end, 1, false)?.first() {
                let id = index::id_of(k);
                first = Some(first.map_or(id, |f| f.min(id)));
            }
        }
        let Some(id) = first else {
            return Ok(());
        };
        match self.r.get::<WebhookDelivery>(id)? {
            Some(d) if d.status.is_open() => self.ready(d, ep),
            _ => Ok(()),
        }
    }

    /// Sends `d` now or schedules it for later.
    fn ready(&mut self, d: WebhookDelivery, ep: &WebhookEndpoint) -> Result<(), StoreError> {
        let at = d.next_attempt_at.unwrap_or(self.now);
        if at > self.now {
            self.out.push(Resolution::Later(d.id, at));
            return Ok(());
        }
        let key = (d.project_id, d.event_sequence);
        let event_json = match self.events.get(&key) {
            Some(e) => e.clone(),
            None => {
                let e = self
                    .r
                    .event_at(d.project_id, d.event_sequence)?
                    .map(|ev| Arc::<str>::from(views::event(&ev).to_string()));
                self.events.insert(key, e.clone());
                e
            }
        };
        let Some(event_json) = event_json else {
            tracing::error!(delivery = %delivery_ref(d.id), "the event of a delivery is missing");
            return Ok(());
        };
        self.out.push(Resolution::Send(Job {
            id: d.id,
            endpoint: ep.id,
            ordered: ep.delivery_mode == DeliveryMode::Ordered,
            attempt: d.attempt + 1,
            url: ep.url.clone(),
            secrets: ep.live_secrets(self.now).map(str::to_string).collect(),
            event_json,
        }));
        Ok(())
    }
}
