//! A fault-injecting proxy for S3 in front of moto: what the journal shipper meets when the
//! bucket throttles, fails, tears an upload or cannot be reached. Requests signed for another
//! service (EC2, SSM, SQS through the same endpoint) are forwarded untouched.
//!
//! A torn upload is forwarded with its body cut short and the checksum it gave: S3 (and
//! moto as `scripts/moto_server.py` runs it) refuses it with `BadDigest` and keeps nothing.
//! [`S3FaultProxy::torn_stored`] counts the torn uploads the store answered 200 to anyway,
//! which a faithful store never does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::proxy::{
    Fault, Listening, answer, answer_fault, exchange, header, listen, read_request,
    with_content_length,
};

/// A fault the proxy draws for an S3 request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum S3Fault {
    /// HTTP 503 `SlowDown`, as S3 throttles.
    Throttled,
    /// HTTP 500 `InternalError`.
    ServerError,
    /// The connection is closed without an answer, nothing forwarded.
    Dropped,
    /// The answer comes 2 s late (forwarded).
    Slow,
    /// A PutObject forwarded with half its body and the checksum of the whole.
    TornPut,
    /// A PutObject forwarded whole, stored, and its answer lost (the connection closed).
    AnswerLost,
}

impl S3Fault {
    /// Every kind; the last [`S3Fault::UPLOADS_ONLY`] only for uploads.
    pub const ALL: [S3Fault; 6] = [
        S3Fault::Throttled,
        S3Fault::ServerError,
        S3Fault::Dropped,
        S3Fault::Slow,
        S3Fault::TornPut,
        S3Fault::AnswerLost,
    ];

    /// How many kinds at the end of [`S3Fault::ALL`] apply to uploads only.
    pub const UPLOADS_ONLY: usize = 2;
}

#[derive(Default)]
struct State {
    random: Option<(f64, fastrand::Rng)>,
    /// Faults for the next uploads, in order, before any random one.
    next_puts: std::collections::VecDeque<S3Fault>,
    outage: bool,
    /// Actions answered 403 `AccessDenied`, as S3 answers a role without the permission.
    denied: std::collections::BTreeSet<String>,
    hits: BTreeMap<String, usize>,
    injected: BTreeMap<S3Fault, usize>,
    dropped_in_outage: usize,
    torn_stored: usize,
}

/// The proxy. It stops when dropped.
pub struct S3FaultProxy {
    listening: Listening,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for S3FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.listening.fmt(f)
    }
}

impl S3FaultProxy {
    /// Starts it on a free port of 127.0.0.1, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> S3FaultProxy {
        let state = Arc::new(Mutex::new(State::default()));
        let listening = listen(upstream, state.clone(), serve).await;
        S3FaultProxy { listening, state }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.listening.endpoint()
    }

    /// From now on, answers each S3 request with a random fault with probability `rate`
    /// (drawn uniformly from the kinds that apply to it), seeded.
    pub fn random(&self, rate: f64, seed: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.random = Some((rate, fastrand::Rng::with_seed(seed)));
        }
    }

    /// Answers the next upload (PutObject) with `fault`, after any queued before it.
    pub fn next_put(&self, fault: S3Fault) {
        if let Ok(mut s) = self.state.lock() {
            s.next_puts.push_back(fault);
        }
    }

    /// While `on`, the bucket cannot be reached: every S3 connection is closed unanswered.
    pub fn outage(&self, on: bool) {
        if let Ok(mut s) = self.state.lock() {
            s.outage = on;
        }
    }

    /// From now on, answers `action` (`PutObject`, `GetObject`, `ListObjectsV2`) with 403
    /// `AccessDenied`, as S3 does when the role lacks the permission.
    pub fn deny(&self, action: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.denied.insert(action.to_owned());
        }
    }

    /// Ends random and queued faults, denials and any outage.
    pub fn clear(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.random = None;
            s.next_puts.clear();
            s.denied.clear();
            s.outage = false;
        }
    }

    /// S3 requests seen, by action (`PutObject`, `GetObject`, `ListObjectsV2`, …).
    pub fn hits(&self) -> BTreeMap<String, usize> {
        self.state
            .lock()
            .map_or_else(|_| BTreeMap::new(), |s| s.hits.clone())
    }

    /// Random faults injected so far, by kind.
    pub fn injected(&self) -> BTreeMap<S3Fault, usize> {
        self.state
            .lock()
            .map_or_else(|_| BTreeMap::new(), |s| s.injected.clone())
    }

    /// S3 requests dropped during outages.
    pub fn dropped_in_outage(&self) -> usize {
        self.state.lock().map_or(0, |s| s.dropped_in_outage)
    }

    /// Torn uploads the store answered 200 to (kept, as S3 never does).
    pub fn torn_stored(&self) -> usize {
        self.state.lock().map_or(0, |s| s.torn_stored)
    }
}

/// The S3 action of a path-style request (`/bucket` or `/bucket/key`), or `None` for a
/// request signed for another service.
fn s3_action(head: &str) -> Option<String> {
    if !header(head, "authorization").is_some_and(|a| a.contains("/s3/aws4_request")) {
        return None;
    }
    let mut request_line = head.lines().next()?.split(' ');
    let (method, target) = (request_line.next()?, request_line.next()?);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let object = path.trim_start_matches('/').contains('/');
    let has = |name: &str| {
        query
            .split('&')
            .any(|p| p == name || p.starts_with(&format!("{name}=")))
    };
    let action = match (method, object) {
        ("PUT", true) if has("partNumber") => "UploadPart",
        ("PUT", true) => "PutObject",
        ("PUT", false) => "CreateBucket",
        ("GET", true) => "GetObject",
        ("GET", false) if has("list-type") => "ListObjectsV2",
        ("GET", false) => "ListObjects",
        ("HEAD", true) => "HeadObject",
        ("HEAD", false) => "HeadBucket",
        ("DELETE", true) => "DeleteObject",
        _ => "Other",
    };
    Some(action.to_owned())
}

fn s3_error(status: u16, code: &str) -> Fault {
    Fault {
        action: String::new(),
        status,
        body: format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the test proxy</Message><RequestId>fault</RequestId></Error>"
        ),
        times: None,
    }
}

/// The request with its body cut to half, and its Content-Length said so.
fn torn(head: &str, body: &[u8]) -> (String, Vec<u8>) {
    let cut = body[..body.len() / 2].to_vec();
    (with_content_length(head, cut.len()), cut)
}

fn status_of(head: Option<&str>) -> Option<u16> {
    head?.lines().next()?.split(' ').nth(1)?.parse().ok()
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let Some((head, body)) = read_request(&mut client).await? else {
        return Ok(());
    };
    let Some(action) = s3_action(&head) else {
        let (head, body) = exchange(upstream, &head, &body).await?;
        return answer(&mut client, head.as_deref(), &body).await;
    };
    let (fault, outage, denied) = {
        let mut s = state
            .lock()
            .map_err(|_| std::io::Error::other("proxy state poisoned"))?;
        *s.hits.entry(action.clone()).or_default() += 1;
        let denied = s.denied.contains(&action);
        let upload = action == "PutObject";
        let kinds = S3Fault::ALL.len() - if upload { 0 } else { S3Fault::UPLOADS_ONLY };
        let queued = if upload && !s.outage {
            s.next_puts.pop_front()
        } else {
            None
        };
        let fault = match s.random.as_mut() {
            _ if queued.is_some() => queued,
            Some((rate, rng)) => {
                let draw = rng.f64() < *rate;
                draw.then(|| S3Fault::ALL[rng.usize(..kinds)])
            }
            None => None,
        };
        if s.outage {
            s.dropped_in_outage += 1;
        } else if let Some(kind) = fault {
            *s.injected.entry(kind).or_default() += 1;
        }
        (fault, s.outage, denied)
    };
    if outage {
        return client.shutdown().await;
    }
    if denied {
        return answer_fault(&mut client, &s3_error(403, "AccessDenied")).await;
    }
    match fault {
        None => {}
        Some(S3Fault::Throttled) => {
            return answer_fault(&mut client, &s3_error(503, "SlowDown")).await;
        }
        Some(S3Fault::ServerError) => {
            return answer_fault(&mut client, &s3_error(500, "InternalError")).await;
        }
        Some(S3Fault::Dropped) => return client.shutdown().await,
        Some(S3Fault::Slow) => tokio::time::sleep(Duration::from_secs(2)).await,
        Some(S3Fault::TornPut) => {
            let (head, body) = torn(&head, &body);
            let (answer_head, answer_body) = exchange(upstream, &head, &body).await?;
            if status_of(answer_head.as_deref()).is_some_and(|s| (200..300).contains(&s))
                && let Ok(mut s) = state.lock()
            {
                s.torn_stored += 1;
            }
            return answer(&mut client, answer_head.as_deref(), &answer_body).await;
        }
        Some(S3Fault::AnswerLost) => {
            exchange(upstream, &head, &body).await?;
            return client.shutdown().await;
        }
    }
    let (head, body) = exchange(upstream, &head, &body).await?;
    answer(&mut client, head.as_deref(), &body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_requests_are_named_by_method_path_and_query() {
        let signed = "Authorization: AWS4-HMAC-SHA256 Credential=testing/20261204/us-west-2/s3/aws4_request, SignedHeaders=host";
        let head = |line: &str| format!("{line}\r\nHost: 127.0.0.1\r\n{signed}");
        let cases = [
            ("PUT /journals/c/segments/x HTTP/1.1", "PutObject"),
            (
                "GET /journals/c/segments/x?x-id=GetObject HTTP/1.1",
                "GetObject",
            ),
            (
                "GET /journals?list-type=2&prefix=c%2F HTTP/1.1",
                "ListObjectsV2",
            ),
            ("PUT /journals HTTP/1.1", "CreateBucket"),
            (
                "PUT /journals/k?partNumber=1&uploadId=u HTTP/1.1",
                "UploadPart",
            ),
        ];
        for (line, action) in cases {
            assert_eq!(s3_action(&head(line)).as_deref(), Some(action), "{line}");
        }
        let ec2 = "POST / HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=testing/20261204/us-west-2/ec2/aws4_request";
        assert_eq!(s3_action(ec2), None);
    }

    #[test]
    fn a_torn_upload_says_its_shorter_length() {
        let (head, body) = torn(
            "PUT /b/k HTTP/1.1\r\nContent-Length: 10\r\nHost: h",
            b"0123456789",
        );
        assert_eq!(body, b"01234");
        assert!(
            head.contains("Content-Length: 5") && !head.contains(": 10"),
            "{head}"
        );
    }
}
