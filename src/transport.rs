//! Serving client connections (DECISIONS.md section 16): our own accept loop over
//! hyper, so that
//!
//! - a request head must arrive within `limits.header_read_timeout_secs` of the accept (TLS
//!   handshake included) or of the first byte of the next request, and a keep-alive
//!   connection with nothing in flight closes after `limits.idle_timeout_secs` of silence;
//! - at most `limits.max_connections` connections are open: at the ceiling a new connection
//!   sheds the longest-idle one, and when every connection is busy the newcomer is answered
//!   503 `too_many_connections` in the SPEC.md section 7 envelope (a small overflow budget;
//!   beyond it the socket is closed at once), never left to an accept error;
//! - the answers hyper writes on its own (400 for malformed HTTP, 414, 431) carry the SPEC.md
//!   section 7 envelope too: the parser's limits are set above ours (ours are enforced by
//!   [`crate::api::http_rules`]), and what the parser still refuses is rewritten on its way
//!   out by [`TrackedIo`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

use crate::config::{LimitsConfig, PARSER_MAX_HEADERS};

/// Largest request head the HTTP/1 parser buffers (431 above, enveloped by [`TrackedIo`]).
const PARSER_MAX_BUF: usize = 512 * 1024;
/// How long open connections may take to finish their requests after a stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Connection limits, from `[limits]` (DECISIONS.md section 16).
#[derive(Debug, Clone)]
pub struct Settings {
    pub header_read_timeout: Duration,
    /// Time to read a whole request body, from the end of its head ([`DeadlineBody`]).
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Settings {
    pub fn from_limits(l: &LimitsConfig) -> Settings {
        Settings {
            header_read_timeout: Duration::from_secs(l.header_read_timeout_secs.max(1)),
            body_read_timeout: Duration::from_secs(l.body_read_timeout_secs.max(1)),
            idle_timeout: Duration::from_secs(l.idle_timeout_secs.max(1)),
            max_connections: l.max_connections.max(1),
        }
    }

    /// Connections over the ceiling that are still answered 503 (each for at most one
    /// header-read timeout) before further ones are closed unanswered.
    fn overflow_budget(&self) -> usize {
        (self.max_connections / 10).clamp(16, 1024)
    }
}

/// One open connection, as the accept loop and the request path see it.
struct ConnState {
    epoch: Instant,
    /// Requests in flight, response bodies included (an event stream is never idle).
    active: AtomicUsize,
    /// Milliseconds since `epoch` of the last byte read or the last request finished.
    last_activity: AtomicU64,
    /// Milliseconds since `epoch`, plus one, when the request head being read began; 0 when
    /// no head is pending.
    head_started: AtomicU64,
    /// HTTP/2: bytes between requests are frames (pings, settings), not a request head.
    h2: AtomicBool,
    /// Set when the accept loop sheds this connection to make room.
    shed: AtomicBool,
    shed_notify: Notify,
    /// Wakes the connection's timer when its deadline moves (a head starts, a request ends).
    rearm: Notify,
}

impl ConnState {
    fn new(epoch: Instant) -> ConnState {
        let now = ms_since(epoch);
        ConnState {
            epoch,
            active: AtomicUsize::new(0),
            last_activity: AtomicU64::new(now),
            // A fresh connection owes its first request head within the header timeout.
            head_started: AtomicU64::new(now + 1),
            h2: AtomicBool::new(false),
            shed: AtomicBool::new(false),
            shed_notify: Notify::new(),
            rearm: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        ms_since(self.epoch)
    }

    fn on_bytes_read(&self) {
        let now = self.now();
        self.last_activity.store(now, Ordering::SeqCst);
        if !self.h2.load(Ordering::Relaxed)
            && self.active.load(Ordering::SeqCst) == 0
            && self.head_started.load(Ordering::SeqCst) == 0
        {
            self.head_started.store(now + 1, Ordering::SeqCst);
            self.rearm.notify_one();
        }
    }

    /// A request head was read. `None` when the connection is being shed.
    fn begin_request(self: &Arc<Self>) -> Option<ActiveGuard> {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.head_started.store(0, Ordering::SeqCst);
        let guard = ActiveGuard(self.clone());
        if self.shed.load(Ordering::SeqCst) {
            return None;
        }
        Some(guard)
    }

    /// Tries to mark an idle connection as shed; false when a request started meanwhile.
    fn try_shed(&self) -> bool {
        self.shed.store(true, Ordering::SeqCst);
        if self.active.load(Ordering::SeqCst) > 0 {
            self.shed.store(false, Ordering::SeqCst);
            return false;
        }
        self.shed_notify.notify_one();
        true
    }

    /// When this connection must be closed if nothing happens before, in ms since `epoch`;
    /// `None` while a request is in flight.
    fn deadline(&self, s: &Settings) -> Option<u64> {
        if self.active.load(Ordering::SeqCst) > 0 {
            return None;
        }
        match self.head_started.load(Ordering::SeqCst) {
            0 => {
                Some(self.last_activity.load(Ordering::SeqCst) + s.idle_timeout.as_millis() as u64)
            }
            h => Some(h - 1 + s.header_read_timeout.as_millis() as u64),
        }
    }
}

fn ms_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// Counts a request as in flight until dropped (with the response body).
struct ActiveGuard(Arc<ConnState>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let now = self.0.now();
        self.0.last_activity.store(now, Ordering::SeqCst);
        self.0.active.fetch_sub(1, Ordering::SeqCst);
        self.0.rearm.notify_one();
    }
}

/// Every open connection, for the ceiling and the shutdown.
struct Tracker {
    settings: Settings,
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    overflow: AtomicUsize,
}

impl Tracker {
    /// Registers a new connection, shedding the longest-idle one at the ceiling. `None` when
    /// the ceiling is reached and no connection is idle.
    fn admit(&self) -> Option<(u64, Arc<ConnState>)> {
        let mut conns = self.conns.lock().expect("lock");
        if conns.len() >= self.settings.max_connections && !shed_idle(&mut conns) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(ConnState::new(self.epoch));
        conns.insert(id, c.clone());
        Some((id, c))
    }

    /// Out of file handles: close the longest-idle connection, if any.
    fn make_room(&self) {
        let mut conns = self.conns.lock().expect("lock");
        shed_idle(&mut conns);
    }

    fn open(&self) -> usize {
        self.conns.lock().expect("lock").len()
    }
}

/// Sheds the connection idle the longest; false when none is idle.
fn shed_idle(conns: &mut HashMap<u64, Arc<ConnState>>) -> bool {
    let mut idle: Vec<(u64, u64)> = conns
        .iter()
        .filter(|(_, c)| c.active.load(Ordering::SeqCst) == 0)
        .map(|(id, c)| (c.last_activity.load(Ordering::SeqCst), *id))
        .collect();
    idle.sort_unstable();
    for (_, id) in idle {
        if conns.get(&id).is_some_and(|c| c.try_shed()) {
            conns.remove(&id);
            tracing::debug!(
                conn = id,
                "shed an idle connection at the connection ceiling"
            );
            return true;
        }
    }
    false
}

/// Removes a connection from the tracker when its task ends.
struct Registered {
    tracker: Arc<Tracker>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.tracker.conns.lock().expect("lock").remove(&self.id);
    }
}

/// Serves `app` on `listener` (HTTPS when `tls` is given) until `shutdown` completes, then
/// lets open connections finish their requests for up to 10 seconds.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let tracker = Arc::new(Tracker {
        settings,
        epoch: Instant::now(),
        conns: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        overflow: AtomicUsize::new(0),
    });
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => r,
        };
        let (tcp, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file handles (EMFILE, ENFILE) or a connection gone before accept:
                // make room and carry on.
                tracing::warn!(error = %e, "accepting a connection failed");
                tracker.make_room();
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        match tracker.admit() {
            Some((id, conn)) => {
                let reg = Registered {
                    tracker: tracker.clone(),
                    id,
                };
                tokio::spawn(serve_conn(
                    reg,
                    conn,
                    tcp,
                    peer,
                    acceptor.clone(),
                    app.clone(),
                    stop_rx.clone(),
                ));
            }
            None => {
                let t = tracker.clone();
                if t.overflow.fetch_add(1, Ordering::SeqCst) < t.settings.overflow_budget() {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let limit = t.settings.header_read_timeout;
                        let _ = tokio::time::timeout(limit, refuse(tcp, acceptor)).await;
                        t.overflow.fetch_sub(1, Ordering::SeqCst);
                    });
                } else {
                    t.overflow.fetch_sub(1, Ordering::SeqCst);
                    drop(tcp);
                }
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while tracker.open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Ok(())
}

async fn serve_conn(
    reg: Registered,
    conn: Arc<ConnState>,
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    stop: watch::Receiver<bool>,
) {
    let settings = reg.tracker.settings.clone();
    match acceptor {
        None => run_conn(tcp, false, conn, peer, app, stop, settings).await,
        Some(acceptor) => {
            // The handshake is part of the first request head's time budget.
            let handshake =
                tokio::time::timeout(settings.header_read_timeout, acceptor.accept(tcp));
            let tls = tokio::select! {
                r = handshake => match r {
                    Ok(Ok(s)) => s,
                    _ => return,
                },
                _ = conn.shed_notify.notified() => return,
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            conn.h2.store(h2, Ordering::Relaxed);
            run_conn(tls, h2, conn, peer, app, stop, settings).await
        }
    }
}

async fn run_conn<I>(
    io: I,
    h2: bool,
    conn: Arc<ConnState>,
    peer: SocketAddr,
    app: Router,
    mut stop: watch::Receiver<bool>,
    settings: Settings,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(TrackedIo::new(io, conn.clone()));
    let c2 = conn.clone();
    let body_timeout = settings.body_read_timeout;
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let guard = c2.begin_request();
        let app = app.clone();
        async move {
            let Some(guard) = guard else {
                return Ok::<_, Infallible>(busy_response());
            };
            let mut req = req.map(|b| Body::new(DeadlineBody::new(b, body_timeout)));
            req.extensions_mut().insert(ConnectInfo(peer));
            let resp = match app.oneshot(req).await {
                Ok(r) => r,
                Err(e) => match e {},
            };
            // The closure owns the guard: the request stays counted as in flight until
            // its response body is done (dropped).
            Ok(resp.map(|b| {
                Body::new(b.map_frame(move |frame| {
                    let _in_flight = &guard;
                    frame
                }))
            }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .max_headers(PARSER_MAX_HEADERS)
        .max_buf_size(PARSER_MAX_BUF)
        // Our own clock (below) times the head; hyper's would also cut idle keep-alive.
        .header_read_timeout(None)
        // One buffer per response head, so TrackedIo sees hyper's own error answers whole.
        .writev(false);
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let served = builder.serve_connection(io, svc);
    tokio::pin!(served);
    let mut stopping = false;
    loop {
        let wake = match conn.deadline(&settings) {
            Some(at) => conn.epoch + Duration::from_millis(at),
            None => Instant::now() + settings.idle_timeout,
        };
        tokio::select! {
            _ = served.as_mut() => return,
            _ = conn.shed_notify.notified() => return,
            _ = conn.rearm.notified() => {}
            _ = stop.changed(), if !stopping => {
                stopping = true;
                if conn.active.load(Ordering::SeqCst) == 0 {
                    return;
                }
                served.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                if conn.deadline(&settings).is_some_and(|at| conn.now() >= at) {
                    return;
                }
            }
        }
    }
}

/// The error a request body gives once its time is up ([`Settings::body_read_timeout`]);
/// the body extractor answers it 408 `request_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received in time")]
pub struct BodyTimeout;

/// A request body that must be read whole within a deadline set when its head was read:
/// a client trickling bytes cannot hold a connection past it, whatever the
/// handler does. Reading stops with [`BodyTimeout`] at the deadline.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: bool,
}

impl DeadlineBody {
    fn new(inner: Incoming, limit: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            expired: false,
        }
    }
}

impl hyper::body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(axum::Error::new)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired = true;
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimeout))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The SPEC.md section 7 envelope as response bytes parts: (status line reason, JSON body).
fn envelope_json(status: StatusCode, code: &str, message: &str, request_id: &str) -> String {
    let error_type = if status.is_server_error() {
        "api_error"
    } else {
        "invalid_request_error"
    };
    serde_json::json!({
        "error": code,
        "code": code,
        "type": error_type,
        "message": message,
        "request_id": request_id,
    })
    .to_string()
}

/// A new ULID at the appliance's clock ([`appliance_storage::sources::new_ulid`]): request ids.
pub fn new_ulid() -> ulid::Ulid {
    appliance_storage::sources::new_ulid(appliance_storage::now_us().max(0) as u64 / 1000)
}

fn new_request_id() -> String {
    format!("req_{}", new_ulid())
}

/// 503 `too_many_connections`, closing the connection.
fn busy_response() -> Response<Body> {
    let id = new_request_id();
    let body = envelope_json(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        "The server has too many open connections; retry shortly.",
        &id,
    );
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("request-id", v);
    }
    r
}

/// Answers one request on a connection over the ceiling with 503, then closes it.
async fn refuse(tcp: TcpStream, acceptor: Option<tokio_rustls::TlsAcceptor>) {
    let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(busy_response())
    });
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.keep_alive(false);
    match acceptor {
        None => {
            let _ = http1.serve_connection(TokioIo::new(tcp), svc).await;
        }
        Some(acceptor) => {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let _ = http1.serve_connection(TokioIo::new(tls), svc).await;
            }
        }
    }
}

/// The connection's byte stream: notes reads for the timeouts and replaces hyper's own error
/// answers (an empty 400, 414 or 431 written when a request cannot be parsed) with the
/// SPEC.md section 7 envelope.
struct TrackedIo<I> {
    inner: I,
    conn: Arc<ConnState>,
    /// A replacement answer still to be written, and how much of it is written.
    pending: Vec<u8>,
    pending_at: usize,
}

impl<I> TrackedIo<I> {
    fn new(inner: I, conn: Arc<ConnState>) -> Self {
        TrackedIo {
            inner,
            conn,
            pending: Vec::new(),
            pending_at: 0,
        }
    }
}

impl<I: AsyncWrite + Unpin> TrackedIo<I> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending_at < self.pending.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.pending_at..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.pending_at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.pending.clear();
        self.pending_at = 0;
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for TrackedIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.on_bytes_read();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for TrackedIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.poll_pending(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        if let Some(replacement) = enveloped_parser_error(buf) {
            self.pending = replacement;
            self.pending_at = 0;
            if let Poll::Ready(Err(e)) = self.poll_pending(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// When `buf` is exactly one of hyper's own bodiless error answers (it never carries our
/// `request-id` header, which every answer of the API has), the enveloped replacement.
fn enveloped_parser_error(buf: &[u8]) -> Option<Vec<u8>> {
    let version = match buf.get(..9)? {
        b"HTTP/1.1 " => "HTTP/1.1",
        b"HTTP/1.0 " => "HTTP/1.0",
        _ => return None,
    };
    let (status, code, message) = match buf.get(9..12)? {
        b"400" => (
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The request is not well-formed HTTP.",
        ),
        b"414" => (
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            "The request target is too long.",
        ),
        b"431" => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request_headers_too_large",
            "The request headers are too large.",
        ),
        _ => return None,
    };
    // The whole buffer is one head and nothing else (no body follows hyper's answers).
    if !buf.ends_with(b"\r\n\r\n") || buf.len() > 1024 {
        return None;
    }
    let head = std::str::from_utf8(buf).ok()?.to_ascii_lowercase();
    if head.contains("\r\nrequest-id:") || head.contains("\r\ncontent-type:") {
        return None;
    }
    let id = new_request_id();
    let body = envelope_json(status, code, message, &id);
    Some(
        format!(
            "{version} {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nrequest-id: {id}\r\n\r\n{body}",
            status.as_str(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_errors_are_enveloped_and_ours_are_left_alone() {
        let hy = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Sun, 22 Nov 2026 12:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(enveloped_parser_error(hy).expect("rewritten")).unwrap();
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        let body: serde_json::Value =
            serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"], "invalid_request");
        assert!(body["request_id"].as_str().unwrap().starts_with("req_"));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nrequest-id: req_1\r\ncontent-length: 0\r\n\r\n";
        assert!(enveloped_parser_error(ours).is_none());
        assert!(enveloped_parser_error(b"HTTP/1.1 200 OK\r\n\r\n").is_none());
        let long = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(enveloped_parser_error(long).is_some());
    }

    #[test]
    fn idle_connections_are_shed_oldest_first_and_busy_ones_never() {
        let epoch = Instant::now();
        let mut conns = HashMap::new();
        let busy = Arc::new(ConnState::new(epoch));
        let g = busy.begin_request().expect("not shed");
        conns.insert(1, busy.clone());
        let old = Arc::new(ConnState::new(epoch));
        old.last_activity.store(0, Ordering::SeqCst);
        let newer = Arc::new(ConnState::new(epoch));
        newer.last_activity.store(5, Ordering::SeqCst);
        conns.insert(2, newer.clone());
        conns.insert(3, old.clone());
        assert!(shed_idle(&mut conns));
        assert!(!conns.contains_key(&3) && old.shed.load(Ordering::SeqCst));
        assert!(shed_idle(&mut conns));
        assert!(!conns.contains_key(&2));
        assert!(!shed_idle(&mut conns), "the busy connection is not shed");
        drop(g);
        assert!(shed_idle(&mut conns));
    }
}
