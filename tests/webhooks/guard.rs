//! The URL guard with `webhooks.allow_private_targets` off: at create, at update, and at
//! every send.

use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn refuses_non_public_targets_when_the_override_is_off() {
    let app = spawn_with(Opts {
        allow_private: false,
        ..Opts::default()
    })
    .await;
    for url in [
        // scheme, port, credentials
        "http://example.com/hook",
        "https://example.com:8080/hook",
        "https://user:pw@example.com/hook",
        "ftp://example.com/hook",
        // loopback, in several spellings
        "https://127.0.0.1/hook",
        "https://127.1.2.3:8443/hook",
        "https://0x7f.0.0.1/hook",
        "https://2130706433/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        // unspecified
        "https://0.0.0.0/hook",
        "https://[::]/hook",
        // private
        "https://10.0.0.1/hook",
        "https://172.16.5.4/hook",
        "https://192.168.1.1/hook",
        "https://[::ffff:192.168.1.1]/hook",
        // link-local and cloud metadata
        "https://169.254.10.10/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[fe80::1]/hook",
        "https://[fd00:ec2::254]/hook",
        "https://100.100.100.200/hook",
        // CGNAT
        "https://100.64.0.1/hook",
        "https://100.127.255.254/hook",
        // IPv6 ULA
        "https://[fc00::1]/hook",
        "https://[fd12:3456:789a::1]/hook",
        // multicast, reserved
        "https://224.0.0.1/hook",
        "https://[ff02::1]/hook",
        "https://240.0.0.1/hook",
        // names that resolve to loopback
        "https://localhost/hook",
        "https://localhost.:8443/hook",
    ] {
        let e = app
            .post("/v1/webhooks", json!({ "url": url }))
            .await
            .expect_error(400, "invalid_url");
        assert_eq!(e["param"], "url", "{url}: {e}");
    }
    let l = app.get("/v1/webhooks").await.expect(200);
    assert_eq!(l["data"], json!([]), "nothing was created");
}

#[tokio::test]
async fn update_is_checked_and_every_send_is_checked_again() {
    // Created while the override is on (a local receiver, a loopback https target and a name
    // that resolves to loopback)...
    let rx = receiver().await;
    let mut app = spawn_app().await;
    let plain = s(&app.create_endpoint(&rx.url("/guarded"), json!({})).await["id"]);
    let literal = s(&app
        .create_endpoint("https://127.0.0.1:8443/hook", json!({}))
        .await["id"]);
    let named = s(&app
        .create_endpoint("https://localhost:8443/hook", json!({}))
        .await["id"]);
    app.customer().await;
    rx.wait("/guarded", 1, Duration::from_secs(10)).await;

    // ... then the server restarts with it off: each send is refused before any connection,
    // and the receiver hears nothing more.
    app.kill();
    app.start_with(Opts {
        allow_private: false,
        retry_schedule: Some("60".into()),
        ..Opts::default()
    });
    let cust = app.customer().await;
    let evt = s(&app.events_of(&cust).await[0]["id"]);
    let d = app
        .wait_deliveries(&format!("event_id={evt}"), Duration::from_secs(10), |d| {
            d.len() == 3 && d.iter().all(|x| x["status"] == "failed")
        })
        .await;
    let detail = |ep: &str| {
        let x = d.iter().find(|x| x["endpoint_id"] == ep).unwrap();
        assert!(x["response_status"].is_null(), "{x}");
        s(&x["error_detail"])
    };
    assert!(detail(&plain).contains("https"), "{}", detail(&plain));
    assert!(
        detail(&literal).contains("loopback"),
        "{}",
        detail(&literal)
    );
    assert!(detail(&named).contains("loopback"), "{}", detail(&named));
    assert_eq!(
        rx.hits("/guarded").len(),
        1,
        "no request reached the receiver"
    );

    let e = app
        .patch(
            &format!("/v1/webhooks/{plain}"),
            json!({ "url": "https://192.168.0.10/hook" }),
        )
        .await
        .expect_error(400, "invalid_url");
    assert_eq!(e["param"], "url");
    let e = app
        .patch(
            &format!("/v1/webhooks/{plain}"),
            json!({ "url": "https://localhost/hook" }),
        )
        .await
        .expect_error(400, "invalid_url");
    assert!(s(&e["message"]).contains("loopback"), "{e}");
}
