//! Connection abuse (DECISIONS.md section 16): idle sockets beyond the
//! connection ceiling, idle keep-alive and header-read timeouts, 503 when every connection is
//! busy, and a POST refused before its body is read leaving the connection usable.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// One HTTP/1.1 answer read off a raw socket.
pub struct RawResp {
    pub status: u16,
    pub head: String,
    pub body: Value,
}

/// Reads one response (head and a `content-length` body) from `s`, within `limit`.
pub async fn read_response(s: &mut TcpStream, limit: Duration) -> Option<RawResp> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + limit;
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status: u16 = head.get(9..12)?.parse().ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
    Some(RawResp {
        status,
        head: head.to_ascii_lowercase(),
        body,
    })
}

/// Sends `req` on a new connection and reads the answer.
pub async fn raw_request(addr: &str, req: &[u8]) -> RawResp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(req).await.expect("write");
    read_response(&mut s, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| {
            panic!(
                "no answer to {:?}",
                String::from_utf8_lossy(&req[..req.len().min(200)])
            )
        })
}

/// Asserts a raw answer is the SPEC.md section 7 envelope with a request id.
pub fn assert_envelope(r: &RawResp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{} {}", r.head, r.body);
    assert!(
        r.head.contains("content-type: application/json"),
        "not JSON: {}",
        r.head
    );
    assert_eq!(r.body["error"], code, "{}", r.body);
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert!(r.body["type"].is_string(), "{}", r.body);
    assert!(r.body["message"].is_string(), "{}", r.body);
    assert!(
        r.body["request_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("req_")),
        "{}",
        r.body
    );
}

/// True when the server closes `s` (EOF or reset) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 256];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

fn ping_request(token: &str) -> Vec<u8> {
    format!("GET /v1/ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n")
        .into_bytes()
}

#[tokio::test]
async fn idle_sockets_beyond_the_file_handle_limit_do_not_lock_out_authenticated_requests() {
    // 256 file handles for the server; 300 idle sockets would exhaust them without the
    // connection ceiling (100 here), and authenticated requests would time out.
    let app = spawn_app_sh(
        "ulimit -n 256",
        &[("APPLIANCE_LIMITS__MAX_CONNECTIONS", "100")],
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(&app.addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for i in 0..10 {
        let r = client
            .get(app.url("/v1/ping"))
            .header("Authorization", format!("Bearer {}", app.wallet_key))
            .send()
            .await
            .unwrap_or_else(|e| panic!("authenticated request {i} failed: {e}"));
        assert_eq!(r.status(), 200, "request {i}");
    }
    // The oldest idle sockets were shed to make room.
    let mut first = idle.remove(0);
    assert!(
        closed_within(&mut first, Duration::from_secs(2)).await,
        "the longest-idle socket was not shed"
    );
}

#[tokio::test]
async fn at_the_ceiling_with_every_connection_busy_a_new_one_is_answered_503_in_the_envelope() {
    let app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_LIMITS__MAX_CONNECTIONS", "3")]).await;
    // Three event streams keep three connections busy.
    let mut streams = Vec::new();
    for _ in 0..3 {
        let c = reqwest::Client::new();
        let r = c
            .get(app.url("/v1/events/stream"))
            .header("Authorization", format!("Bearer {}", app.wallet_key))
            .send()
            .await
            .expect("stream");
        assert_eq!(r.status(), 200);
        streams.push((c, r));
    }
    let r = raw_request(&app.addr, &ping_request(&app.wallet_key)).await;
    assert_envelope(&r, 503, "too_many_connections");
    assert!(r.head.contains("retry-after:"), "{}", r.head);
    assert!(r.head.contains("connection: close"), "{}", r.head);
    drop(streams);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = raw_request(&app.addr, &ping_request(&app.wallet_key)).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_LIMITS__IDLE_TIMEOUT_SECS", "2")],
    )
    .await;
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    s.write_all(&ping_request(&app.wallet_key)).await.unwrap();
    let r = read_response(&mut s, Duration::from_secs(5)).await.unwrap();
    assert_eq!(r.status, 200);
    let t = Instant::now();
    assert!(
        closed_within(&mut s, Duration::from_secs(8)).await,
        "idle connection still open after 8 s"
    );
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "closed too early: {took:?}"
    );
    // A connection in use is not idle: a second one answering within the timeout stays.
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    for _ in 0..3 {
        s.write_all(&ping_request(&app.wallet_key)).await.unwrap();
        let r = read_response(&mut s, Duration::from_secs(5)).await.unwrap();
        assert_eq!(r.status, 200);
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
}

#[tokio::test]
async fn a_slowloris_header_is_cut_after_the_header_read_timeout() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[
            ("APPLIANCE_LIMITS__HEADER_READ_TIMEOUT_SECS", "1"),
            ("APPLIANCE_LIMITS__IDLE_TIMEOUT_SECS", "30"),
        ],
    )
    .await;
    // A head trickled one header every 200 ms never completes.
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    s.write_all(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let t = Instant::now();
    let mut cut = false;
    while t.elapsed() < Duration::from_secs(6) {
        if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
            cut = true;
            break;
        }
        let mut b = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                cut = true;
                break;
            }
            _ => {}
        }
    }
    assert!(cut, "a trickled header was not cut within 6 s");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "cut late: {:?}",
        t.elapsed()
    );
    // A connection that never sends a byte is cut after the header timeout too.
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(4)).await);
}

#[tokio::test]
async fn a_post_refused_before_its_body_is_read_leaves_the_connection_usable() {
    let app = spawn_app().await;
    let body = format!("{{\"reference_id\":\"{}\"}}", "x".repeat(1900));
    let head = format!(
        "POST /v1/customers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer apktest{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        "0".repeat(64),
        body.len()
    );
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..100]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.write_all(&body.as_bytes()[100..]).await.unwrap();
    let r = read_response(&mut s, Duration::from_secs(5))
        .await
        .expect("401");
    assert_envelope(&r, 401, "invalid_api_key");
    assert!(!r.head.contains("connection: close"), "{}", r.head);
    // The next request on the same connection is read from a clean stream.
    s.write_all(&ping_request(&app.wallet_key)).await.unwrap();
    let r = read_response(&mut s, Duration::from_secs(5))
        .await
        .expect("the connection broke after the 401");
    assert_eq!(r.status, 200, "{}", r.body);
}
