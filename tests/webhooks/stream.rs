//! `GET /v1/events/stream` read by a real SSE client.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::*;

/// One server-sent event.
#[derive(Debug, Clone)]
struct Frame {
    id: Option<String>,
    event: String,
    data: Value,
}

/// A minimal SSE reader (the text/event-stream format, as EventSource parses it).
struct SseClient {
    resp: reqwest::Response,
    buf: String,
}

impl SseClient {
    async fn open(app: &App, last_event_id: Option<&str>) -> Result<SseClient, (u16, Value)> {
        let mut rb = app
            .client
            .get(format!("{}/v1/events/stream", app.base_url))
            .header("Authorization", format!("Bearer {}", app.wallet_key))
            .header("Accept", "text/event-stream")
            .timeout(Duration::from_secs(3600));
        if let Some(id) = last_event_id {
            rb = rb.header("Last-Event-ID", id);
        }
        let resp = rb.send().await.unwrap();
        if resp.status() != 200 {
            let st = resp.status().as_u16();
            let body = resp.json().await.unwrap_or(Value::Null);
            return Err((st, body));
        }
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Ok(SseClient {
            resp,
            buf: String::new(),
        })
    }

    async fn next(&mut self, within: Duration) -> Option<Frame> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..i + 2).collect();
                let mut f = Frame {
                    id: None,
                    event: "message".into(),
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in raw.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        f.id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        f.event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() && f.id.is_none() {
                    continue; // a comment
                }
                f.data = serde_json::from_str(&data).unwrap_or(Value::Null);
                return Some(f);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.resp.chunk()).await {
                Ok(Ok(Some(c))) => self.buf.push_str(&String::from_utf8_lossy(&c)),
                Ok(_) => return None,
                Err(_) => return None,
            }
        }
    }

    /// The next `event` frame (pings skipped).
    async fn next_event(&mut self, within: Duration) -> Frame {
        loop {
            let f = self.next(within).await.expect("an event frame");
            if f.event == "event" {
                return f;
            }
            assert_eq!(f.event, "ping", "{f:?}");
        }
    }
}

#[tokio::test]
async fn frames_follow_commits_quickly_with_sequence_ids() {
    let app = spawn_app().await;
    app.customer().await;
    let latest = app.get("/v1/events?limit=1").await.expect(200)["data"][0]["sequence"]
        .as_u64()
        .unwrap();
    let mut sse = SseClient::open(&app, None).await.unwrap();
    let ready = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ready.event, "ready");
    assert_eq!(ready.data["cursor"], latest);
    let mut lat = Vec::new();
    for _ in 0..10 {
        let t0 = Instant::now();
        let cust = app.customer().await;
        let f = sse.next_event(Duration::from_secs(5)).await;
        lat.push(t0.elapsed());
        assert_eq!(f.data["type"], "customer.created");
        assert_eq!(f.data["scope"], "account");
        assert_eq!(f.data["livemode"], false);
        assert_eq!(f.data["data"]["id"], cust.as_str());
        let evt = app.events_of(&cust).await.remove(0);
        assert_eq!(f.id.as_deref(), Some(evt["sequence"].to_string().as_str()));
        assert_eq!(f.data["id"], evt["id"]);
        assert_eq!(f.data["created"], evt["created"]);
        assert_eq!(
            f.data["data"], evt["data"],
            "the same data as GET /v1/events"
        );
    }
    lat.sort();
    // Request, commit and frame together; the frame itself follows the commit's notice.
    assert!(lat[5] < Duration::from_millis(100), "median {:?}", lat[5]);
}

#[tokio::test]
async fn resume_with_last_event_id_has_no_gaps_or_duplicates() {
    let app = spawn_app().await;
    let mut sse = SseClient::open(&app, None).await.unwrap();
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().event,
        "ready"
    );
    let mut seen: Vec<u64> = Vec::new();
    for _ in 0..5 {
        app.customer().await;
    }
    for _ in 0..5 {
        let f = sse.next_event(Duration::from_secs(5)).await;
        seen.push(f.id.unwrap().parse().unwrap());
    }
    drop(sse);
    // Missed while disconnected.
    for _ in 0..7 {
        app.customer().await;
    }
    let last = seen.last().unwrap().to_string();
    let mut sse = SseClient::open(&app, Some(&last)).await.unwrap();
    let ready = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ready.event, "ready");
    assert_eq!(ready.data["replay_truncated"], false);
    for _ in 0..7 {
        let f = sse.next_event(Duration::from_secs(5)).await;
        seen.push(f.id.unwrap().parse().unwrap());
    }
    // And live ones after the replay.
    for _ in 0..3 {
        app.customer().await;
        let f = sse.next_event(Duration::from_secs(5)).await;
        seen.push(f.id.unwrap().parse().unwrap());
    }
    let all: Vec<u64> = app
        .get("/v1/events?order=asc&limit=100&type=customer.created")
        .await
        .expect(200)["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seen, all, "every event once, in order");
    assert!(sse
        .next(Duration::from_millis(300))
        .await
        .is_none_or(|f| f.event == "ping"));

    let r = app
        .send(
            reqwest::Method::GET,
            &app.wallet_key,
            "/v1/events/stream",
            None,
            &[("Last-Event-ID", "abc")],
        )
        .await;
    r.expect_error(400, "invalid_request");
}

#[tokio::test]
async fn at_most_ten_streams_per_project() {
    let app = spawn_app().await;
    let mut open = Vec::new();
    for _ in 0..10 {
        let mut s = SseClient::open(&app, None).await.unwrap();
        assert_eq!(s.next(Duration::from_secs(5)).await.unwrap().event, "ready");
        open.push(s);
    }
    let (st, body) = SseClient::open(&app, None)
        .await
        .err()
        .expect("the 11th is refused");
    assert_eq!(st, 429);
    assert_eq!(body["code"], "too_many_streams");
    // Another project has its own ten.
    let other = app.other_project_key();
    let r = app
        .client
        .get(format!("{}/v1/events/stream", app.base_url))
        .header("Authorization", format!("Bearer {other}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(r);
    // Closing one frees its slot.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match SseClient::open(&app, None).await {
            Ok(_) => break,
            Err((429, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("slot not freed: {e:?}"),
        }
    }
}

/// `ping` frames arrive on the configured interval and the server closes the stream at its
/// maximum age (SPEC.md section 8: 25 s and 30 minutes; shortened here through config).
#[tokio::test]
async fn pings_arrive_and_the_stream_closes_at_its_maximum_age() {
    let app = spawn_with(Opts {
        env: vec![
            ("APPLIANCE_WEBHOOKS__STREAM_PING_S".into(), "1".into()),
            ("APPLIANCE_WEBHOOKS__STREAM_MAX_AGE_S".into(), "3".into()),
        ],
        ..Opts::default()
    })
    .await;
    let opened = Instant::now();
    let mut sse = SseClient::open(&app, None).await.expect("stream opens");
    let ready = sse.next(Duration::from_secs(2)).await.expect("ready frame");
    assert_eq!(ready.event, "ready");
    let mut pings = 0;
    while let Some(f) = sse.next(Duration::from_secs(5)).await {
        assert_eq!(f.event, "ping", "{f:?}");
        assert!(f.data["time"].is_string(), "{f:?}");
        pings += 1;
    }
    let lived = opened.elapsed();
    assert!(pings >= 2, "expected a ping every second, got {pings}");
    assert!(
        lived >= Duration::from_millis(2_900) && lived < Duration::from_secs(6),
        "the stream should close at about 3 s, it lived {lived:?}"
    );
    // A closed stream frees its slot: a new one opens.
    assert!(SseClient::open(&app, None).await.is_ok());
}
