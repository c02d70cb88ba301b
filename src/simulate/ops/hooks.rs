//! Webhook endpoints and the dispatcher, key rolls, conversion requests.

use crate::simulate::model::{EndpointM, Receiver};
use crate::simulate::node::Answer;
use crate::simulate::rng;
use crate::simulate::Sim;
use appliance_storage::sources;
use axum::http::Method;
use serde_json::json;
use uuid::Uuid;

impl Sim {
    /// A webhook endpoint whose receiver is healthy, flaky or gone.
    pub(in crate::simulate) async fn new_endpoint(&mut self) -> anyhow::Result<String> {
        let t = self.pick_tenant();
        let live = self.model.tenants[t]
            .endpoints
            .iter()
            .filter(|e| !e.deleted)
            .count();
        if live >= 6 {
            return Ok("enough endpoints".into());
        }
        let receiver = match rng::below(4) {
            0 | 1 => Receiver::Healthy,
            2 => Receiver::Flaky,
            _ => Receiver::Gone,
        };
        let url = format!("https://127.0.0.1:8443/hooks/{}", self.model.next());
        let key = self.model.tenants[t].wallet_key.clone();
        let body = if rng::chance(500) {
            json!({"url": url})
        } else {
            json!({"url": url, "event_types": ["deposit.confirmed", "payout.confirmed", "payout.failed", "invoice.paid"]})
        };
        let a = self
            .node()
            .call(Method::POST, "/v1/webhooks", Some(&key), Some(&body), None)
            .await?;
        match (
            a.status,
            a.str("id").and_then(|s| s.parse::<Uuid>().ok()),
            a.str("secret"),
        ) {
            (201, Some(id), Some(secret)) => self.model.tenants[t].endpoints.push(EndpointM {
                id,
                url: url.clone(),
                receiver,
                secrets: vec![(secret, i64::MAX)],
                deleted: false,
            }),
            _ => self.fail(format!(
                "POST /v1/webhooks answered {} {}",
                a.status, a.body
            )),
        }
        Ok(format!("endpoint {url} ({receiver:?}): {}", a.status))
    }

    /// `method` on endpoint `e` of tenant `t` (`/v1/webhooks/{id}`, then `path`) with the
    /// tenant's wallet key: the endpoint's id and the answer.
    async fn endpoint_call(
        &self,
        (t, e): (usize, usize),
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<(Uuid, Answer)> {
        let tenant = &self.model.tenants[t];
        let id = tenant.endpoints[e].id;
        let uri = format!("/v1/webhooks/{id}{path}");
        let key = Some(tenant.wallet_key.as_str());
        Ok((id, self.node().call(method, &uri, key, body, None).await?))
    }

    /// An endpoint of some tenant that is not deleted: (tenant index, endpoint index).
    pub(in crate::simulate) fn pick_endpoint(&self) -> Option<(usize, usize)> {
        let all: Vec<(usize, usize)> = self
            .model
            .tenants
            .iter()
            .enumerate()
            .flat_map(|(ti, t)| {
                t.endpoints
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| !e.deleted)
                    .map(move |(ei, _)| (ti, ei))
            })
            .collect();
        rng::pick(&all).copied()
    }

    /// Pauses or re-activates an endpoint.
    pub(in crate::simulate) async fn patch_endpoint(&mut self) -> anyhow::Result<String> {
        let Some((t, e)) = self.pick_endpoint() else {
            return Ok("no endpoint".into());
        };
        let status = if rng::chance(500) { "paused" } else { "active" };
        let body = json!({"status": status});
        let (id, a) = self
            .endpoint_call((t, e), Method::PATCH, "", Some(&body))
            .await?;
        // A disabled endpoint (its receiver answered 410, or failed too often) cannot be
        // paused, only re-enabled.
        let disabled_pause =
            a.status == 409 && a.body["code"] == "invalid_state" && status == "paused";
        if a.status != 200 && !disabled_pause {
            self.fail(format!(
                "PATCH /v1/webhooks/{id} {status}: {} {}",
                a.status, a.body
            ));
        }
        Ok(format!("endpoint {id} {status}: {}", a.status))
    }

    /// Rotates an endpoint's secret; the old one signs on for the overlap.
    pub(in crate::simulate) async fn rotate_secret(&mut self) -> anyhow::Result<String> {
        let Some((t, e)) = self.pick_endpoint() else {
            return Ok("no endpoint".into());
        };
        let overlap = if rng::chance(300) {
            0
        } else {
            rng::between(1, 48)
        };
        let body = json!({"overlap_hours": overlap});
        let (id, a) = self
            .endpoint_call((t, e), Method::POST, "/rotate_secret", Some(&body))
            .await?;
        match a.str("secret") {
            Some(secret) if a.status == 200 => {
                let until = sources::now_us() + overlap as i64 * 3_600_000_000;
                let ep = &mut self.model.tenants[t].endpoints[e];
                for s in ep.secrets.iter_mut() {
                    s.1 = s.1.min(until);
                }
                ep.secrets.push((secret, i64::MAX));
            }
            _ => self.fail(format!("rotate_secret {id}: {} {}", a.status, a.body)),
        }
        Ok(format!(
            "endpoint {id} rotated, overlap {overlap} h: {}",
            a.status
        ))
    }

    /// Deletes an endpoint (and its deliveries).
    pub(in crate::simulate) async fn delete_endpoint(&mut self) -> anyhow::Result<String> {
        let Some((t, e)) = self.pick_endpoint() else {
            return Ok("no endpoint".into());
        };
        let (id, a) = self.endpoint_call((t, e), Method::DELETE, "", None).await?;
        if a.status != 200 {
            self.fail(format!("DELETE /v1/webhooks/{id}: {} {}", a.status, a.body));
        }
        self.model.tenants[t].endpoints[e].deleted = true;
        Ok(format!("endpoint {id} deleted: {}", a.status))
    }

    /// The webhook dispatcher's pass over the due deliveries, to simulated receivers: every
    /// delivery must be signed with a secret of its endpoint that is still live, and go to a
    /// URL the tenant registered.
    pub(in crate::simulate) async fn dispatch(&mut self) -> anyhow::Result<String> {
        let endpoints: Vec<EndpointM> = self
            .model
            .tenants
            .iter()
            .flat_map(|t| t.endpoints.iter().cloned())
            .collect();
        let now = sources::now_us();
        let mut bad = Vec::new();
        let mut seen = 0;
        let n = crate::webhooks::dispatcher::deliver_due(
            &self.node().state,
            &self.node().state.webhooks,
            500,
            |url, body, header| {
                seen += 1;
                let Some(ep) = endpoints.iter().find(|e| e.url == url) else {
                    bad.push(format!(
                        "a delivery went to {url}, which no tenant registered"
                    ));
                    return Default::default();
                };
                let signed = ep.secrets.iter().any(|(s, until)| {
                    *until > now
                        && crate::webhooks::signature::verify(
                            header,
                            body.as_bytes(),
                            s,
                            300,
                            now / 1_000_000,
                        )
                        .is_ok()
                });
                if !signed {
                    bad.push(format!(
                        "a delivery to {url} is not signed with a live secret: {header}"
                    ));
                }
                let status = match ep.receiver {
                    Receiver::Healthy => Some(200),
                    Receiver::Gone => Some(410),
                    Receiver::Flaky => match rng::below(3) {
                        0 => Some(200),
                        1 => Some(500),
                        _ => None,
                    },
                };
                crate::webhooks::sender::AttemptResult {
                    status,
                    resolved_ip: Some(std::net::IpAddr::from([127, 0, 0, 1])),
                    duration_ms: 1,
                    error: match status {
                        None => Some("timed out after 10000 ms".into()),
                        Some(s) if !(200..300).contains(&s) => Some(format!("HTTP {s}")),
                        _ => None,
                    },
                    body: Some("ok".into()),
                }
            },
        )
        .await;
        for b in bad {
            self.fail(b);
        }
        match n {
            Ok(n) => Ok(format!("dispatched {seen} sends, {n} outcomes")),
            Err(e) if self.world.crashed.load(std::sync::atomic::Ordering::SeqCst) => {
                Ok(format!("dispatch stopped: {e}"))
            }
            Err(e) => {
                self.fail(format!("the dispatcher's pass failed: {e:#}"));
                Ok(String::new())
            }
        }
    }

    /// The tenant's wallet key rolls itself: the new token from now on, the old one until
    /// its grace ends (then 401), both checked.
    pub(in crate::simulate) async fn roll_key(&mut self) -> anyhow::Result<String> {
        let t = self.pick_tenant();
        let now = sources::now_us();
        // Tokens rolled before: each works until its expiry, and not after.
        let rolled = self.model.tenants[t].rolled.clone();
        for (tok, _, until) in &rolled {
            let a = self
                .node()
                .call(Method::GET, "/v1/ping", Some(tok), None, None)
                .await?;
            let want_ok = now < *until;
            if (a.status == 200) != want_ok {
                self.fail(format!(
                    "a rolled key answered {} {} to ping, {} its grace ended",
                    a.status,
                    a.body,
                    if want_ok { "before" } else { "after" }
                ));
            }
        }
        self.model.tenants[t]
            .rolled
            .retain(|(_, _, until)| *until > now);
        // At most five enabled keys of a kind: the oldest rolled one still in its grace is
        // revoked first (a merchant that finished moving to the new token), and must stop
        // working at once.
        if self.model.tenants[t].rolled.len() >= 2 {
            let (tok, old_id, _) = self.model.tenants[t].rolled.remove(0);
            let key = self.model.tenants[t].wallet_key.clone();
            let a = self
                .node()
                .call(
                    Method::DELETE,
                    &format!("/v1/api_keys/{old_id}"),
                    Some(&key),
                    None,
                    None,
                )
                .await?;
            let after = self
                .node()
                .call(Method::GET, "/v1/ping", Some(&tok), None, None)
                .await?;
            if a.status != 200 || after.status != 401 {
                self.fail(format!(
                    "revoking rolled key {old_id} answered {} {}; the token then answered {}",
                    a.status, a.body, after.status
                ));
            }
        }
        let grace = rng::between(0, 48);
        let (id, key) = (
            self.model.tenants[t].wallet_key_id,
            self.model.tenants[t].wallet_key.clone(),
        );
        let a = self
            .node()
            .post(
                &format!("/v1/api_keys/{id}/roll"),
                &key,
                Some(&json!({"grace_hours": grace})),
            )
            .await?;
        match (
            a.str("token"),
            a.str("id").and_then(|s| s.parse::<Uuid>().ok()),
        ) {
            (Some(token), Some(new_id)) if (200..300).contains(&a.status) => {
                let tenant = &mut self.model.tenants[t];
                tenant
                    .rolled
                    .push((key, id, now + grace as i64 * 3_600_000_000));
                tenant.wallet_key = token;
                tenant.wallet_key_id = new_id;
            }
            _ => self.fail(format!("roll of key {id}: {} {}", a.status, a.body)),
        }
        Ok(format!(
            "wallet key of tenant {t} rolled, grace {grace} h: {}",
            a.status
        ))
    }

    /// Conversion requests, rules and quotes on chains without a DEX: refused in the
    /// envelope, never a 5xx other than `conversion_unavailable`, and no money moves (the
    /// ledger check after the step would see it).
    pub(in crate::simulate) async fn conversion(&mut self) -> anyhow::Result<String> {
        let t = self.model.tenants[self.pick_tenant()].clone();
        let chain = self.pick_chain();
        let (path, method, body, idem) = match rng::below(3) {
            0 => (
                format!("/v1/conversion/rules/{chain}"),
                Method::PUT,
                json!({"enabled": rng::chance(500), "target_asset": "USDT"}),
                None,
            ),
            1 => (
                "/v1/conversions/quote".to_string(),
                Method::POST,
                json!({"chain": chain, "from_asset": "USDC", "to_asset": "USDT", "amount": "1000000"}),
                None,
            ),
            _ => (
                "/v1/conversions".to_string(),
                Method::POST,
                json!({"chain": chain, "from_asset": "USDC", "to_asset": "USDT", "amount": "1000000"}),
                Some(format!("conv-{}", self.model.next())),
            ),
        };
        let a = self
            .node()
            .call(
                method,
                &path,
                Some(&t.payout_key),
                Some(&body),
                idem.as_deref(),
            )
            .await?;
        let refused_well = (400..500).contains(&a.status)
            || (a.status == 503 && a.body["code"] == "conversion_unavailable")
            || (a.status == 200 && path.starts_with("/v1/conversion/rules"));
        if !refused_well || a.body.get("code").is_none() && a.status >= 400 {
            self.fail(format!("{path} answered {} {}", a.status, a.body));
        }
        Ok(format!("{path}: {} {}", a.status, a.body["code"]))
    }
}
