//! Behind a reverse proxy: `X-Forwarded-For` counts only when the peer
//! is in `trusted_proxies`, for API key IP allowlists and the per-IP budget.

use reqwest::Method;
use serde_json::json;

use crate::helpers::*;

const BOGUS: &str = "apktest00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A wallet key that may be used only from 198.51.100.7.
async fn allowlisted_key(app: &App) -> String {
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "behind-proxy", "kind": "wallet", "ip_allowlist": ["198.51.100.7"] }),
        )
        .await;
    s(&k["token"])
}

async fn ping_from(app: &App, token: &str, xff: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = xff.map(|v| ("X-Forwarded-For", v)).into_iter().collect();
    app.send(Method::GET, Some(token), "/v1/ping", None, &headers)
        .await
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_LIMITS__UNAUTHENTICATED_PER_MINUTE", "3")],
    )
    .await;
    let key = allowlisted_key(&app).await;
    // Spoofing the allowed address does not help: the peer (127.0.0.1) is the client.
    ping_from(&app, &key, Some("198.51.100.7"))
        .await
        .expect_error(403, "ip_not_allowed");
    ping_from(&app, &key, None)
        .await
        .expect_error(403, "ip_not_allowed");
    // Nor does a new address per request escape the per-IP budget.
    for i in 0..3 {
        let xff = format!("203.0.113.{i}");
        ping_from(&app, BOGUS, Some(&xff))
            .await
            .expect_error(401, "invalid_api_key");
    }
    ping_from(&app, BOGUS, Some("203.0.113.99"))
        .await
        .expect_error(429, "rate_limited");
}

#[tokio::test]
async fn forwarded_for_from_a_trusted_proxy_names_the_client() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[
            ("APPLIANCE_TRUSTED_PROXIES", "127.0.0.1/32, 10.9.0.0/16"),
            ("APPLIANCE_LIMITS__UNAUTHENTICATED_PER_MINUTE", "3"),
        ],
    )
    .await;
    let key = allowlisted_key(&app).await;
    ping_from(&app, &key, Some("198.51.100.7"))
        .await
        .expect(200);
    // Trusted hops to the right are skipped; the rightmost untrusted address is the client.
    ping_from(&app, &key, Some("198.51.100.7, 10.9.3.4"))
        .await
        .expect(200);
    // What the client wrote itself (left of the address the proxy saw) is ignored.
    ping_from(&app, &key, Some("198.51.100.7, 203.0.113.9"))
        .await
        .expect_error(403, "ip_not_allowed");
    // No header: the proxy itself is the client.
    ping_from(&app, &key, None)
        .await
        .expect_error(403, "ip_not_allowed");
    // The per-IP budget is per forwarded client.
    for _ in 0..3 {
        ping_from(&app, BOGUS, Some("203.0.113.1"))
            .await
            .expect_error(401, "invalid_api_key");
    }
    ping_from(&app, BOGUS, Some("203.0.113.1"))
        .await
        .expect_error(429, "rate_limited");
    ping_from(&app, BOGUS, Some("203.0.113.2"))
        .await
        .expect_error(401, "invalid_api_key");
}
