//! The fault-injecting proxy in front of moto for EC2, SSM and SQS ([`FaultProxy`]), and the
//! HTTP plumbing it shares with the S3 one ([`super::S3FaultProxy`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One canned answer the proxy gives instead of forwarding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The API action it answers (`CreateFleet`, `DescribeSubnets`, `GetParameter`, …).
    pub action: String,
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: String,
    /// How many requests it answers; `None` for all.
    pub times: Option<usize>,
}

impl Fault {
    /// An EC2 error response (`<Response><Errors><Error>…`).
    pub fn ec2_error(action: &str, status: u16, code: &str, times: Option<usize>) -> Fault {
        Fault {
            action: action.to_owned(),
            status,
            body: format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error></Errors><RequestID>fault</RequestID></Response>"
            ),
            times,
        }
    }

    /// A REST-JSON error (EKS's shape: `{"__type": CODE, "message": …}`).
    pub fn rest_json_error(action: &str, status: u16, code: &str, times: Option<usize>) -> Fault {
        Fault {
            action: action.to_owned(),
            status,
            body: format!("{{\"__type\":\"{code}\",\"message\":\"injected by the test proxy\"}}"),
            times,
        }
    }

    /// A CreateFleet answer with no instance and one `errorSet` entry per `(type, subnet,
    /// zone)`, as EC2 reports insufficient capacity for instant fleets (HTTP 200).
    pub fn create_fleet_errors(
        code: &str,
        overrides: &[(&str, &str, &str)],
        times: Option<usize>,
    ) -> Fault {
        let items: String = overrides
            .iter()
            .map(|(instance_type, subnet, zone)| format!(
                "<item><launchTemplateAndOverrides><launchTemplateSpecification><launchTemplateName>lt</launchTemplateName><version>1</version></launchTemplateSpecification><overrides><instanceType>{instance_type}</instanceType><subnetId>{subnet}</subnetId><availabilityZone>{zone}</availabilityZone></overrides></launchTemplateAndOverrides><lifecycle>on-demand</lifecycle><errorCode>{code}</errorCode><errorMessage>injected by the test proxy</errorMessage></item>"
            ))
            .collect();
        Fault {
            action: "CreateFleet".into(),
            status: 200,
            body: format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>fault</requestId><fleetId>fleet-fault</fleetId><errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
            ),
            times,
        }
    }
}

/// A random fault, as [`FaultProxy::random`] draws them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RandomFault {
    /// `InsufficientInstanceCapacity` for one override of a CreateFleet call, drawn at
    /// random (its `errorSet`, HTTP 200, no instance: the pool EC2 tried first had none);
    /// other actions get [`RandomFault::Throttled`] instead.
    InsufficientCapacity,
    /// `RequestLimitExceeded` (EC2) or `ThrottlingException` (SSM, SQS), HTTP 400/503.
    Throttled,
    /// HTTP 500 `InternalError` / `InternalFailure`.
    ServerError,
    /// The connection is closed without an answer.
    Dropped,
    /// The answer comes 2 s late (forwarded).
    Slow,
}

impl RandomFault {
    /// Every kind, in the order they are drawn from.
    pub const ALL: [RandomFault; 5] = [
        RandomFault::InsufficientCapacity,
        RandomFault::Throttled,
        RandomFault::ServerError,
        RandomFault::Dropped,
        RandomFault::Slow,
    ];
}

struct RandomFaults {
    rate: f64,
    rng: fastrand::Rng,
}

#[derive(Default)]
struct ProxyState {
    faults: Vec<Fault>,
    random: Option<RandomFaults>,
    stale: Option<StaleListings>,
    hits: HashMap<String, usize>,
    injected: HashMap<String, usize>,
    random_injected: BTreeMap<RandomFault, usize>,
}

/// What a DescribeInstances answer leaves out of an instance it shows too early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Staleness {
    Tag,
    LaunchTime,
    Both,
}

/// DescribeInstances answers as EC2's eventually consistent reads can give them right after
/// a launch: for `window` after the proxy first sees an instance, it is shown without its
/// NodeClaim tag, its launch time, or both (in turn, by first sighting).
struct StaleListings {
    window: Duration,
    first_seen: HashMap<String, (Instant, Staleness)>,
    /// Instances answered without something, so far.
    shown_stale: usize,
}

impl StaleListings {
    /// Rewrites an EC2 DescribeInstances XML body.
    fn rewrite(&mut self, body: &str) -> String {
        let items = instance_items(body);
        // New instances take the kinds of staleness in turn, in the order they are listed.
        for &(start, end) in &items {
            if let Some(id) = element_text(&body[start..end], "instanceId") {
                let seen = self.first_seen.len();
                self.first_seen.entry(id.to_owned()).or_insert_with(|| {
                    let kind = [Staleness::Tag, Staleness::LaunchTime, Staleness::Both][seen % 3];
                    (Instant::now(), kind)
                });
            }
        }
        let mut out = body.to_owned();
        // Last first, so earlier ranges stay where they are.
        for (start, end) in items.into_iter().rev() {
            let item = &body[start..end];
            let Some((at, staleness)) = element_text(item, "instanceId")
                .and_then(|id| self.first_seen.get(id))
                .copied()
            else {
                continue;
            };
            if at.elapsed() >= self.window {
                continue;
            }
            let mut stale = item.to_owned();
            if staleness != Staleness::LaunchTime {
                stale = without_tag(&stale, crate::provider::tags::NODECLAIM);
            }
            if staleness != Staleness::Tag {
                stale = without_element(&stale, "launchTime");
            }
            if stale != item {
                self.shown_stale += 1;
                out.replace_range(start..end, &stale);
            }
        }
        out
    }
}

/// The byte ranges of each instance's `<item>…</item>` in every `<instancesSet>` of an EC2
/// DescribeInstances answer (items nest: block devices, network interfaces, tags).
fn instance_items(body: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = body[from..].find("<instancesSet>") {
        let mut cursor = from + at + "<instancesSet>".len();
        let mut depth = 0usize;
        let mut start = 0;
        while let Some(open) = body[cursor..].find('<') {
            let tag_start = cursor + open;
            let Some(close) = body[tag_start..].find('>') else {
                return out;
            };
            let tag = &body[tag_start + 1..tag_start + close];
            cursor = tag_start + close + 1;
            match tag {
                "item" => {
                    if depth == 0 {
                        start = tag_start;
                    }
                    depth += 1;
                }
                "/item" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        out.push((start, cursor));
                    }
                }
                "/instancesSet" if depth == 0 => break,
                _ => {}
            }
        }
        from = cursor;
    }
    out
}

/// The text of the first `<name>…</name>` in `xml`.
fn element_text<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + end])
}

/// `xml` without its `<name>…</name>` elements.
fn without_element(xml: &str, name: &str) -> String {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = xml.to_owned();
    while let Some(start) = out.find(&open) {
        let Some(end) = out[start..].find(&close) else {
            break;
        };
        out.replace_range(start..start + end + close.len(), "");
    }
    out
}

/// `xml` without the tag-set entries of `key`.
fn without_tag(xml: &str, key: &str) -> String {
    let needle = format!("<item><key>{key}</key>");
    let mut out = xml.to_owned();
    while let Some(start) = out.find(&needle) {
        let Some(end) = out[start..].find("</item>") else {
            break;
        };
        out.replace_range(start..start + end + "</item>".len(), "");
    }
    out
}

/// The `(instance type, subnet, zone)` of every override of a CreateFleet request body.
fn fleet_overrides(body: &[u8]) -> Vec<(String, String, String)> {
    let mut by_prefix: BTreeMap<String, [String; 3]> = BTreeMap::new();
    for pair in String::from_utf8_lossy(body).split('&') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        let Some((prefix, field)) = key.rsplit_once('.') else {
            continue;
        };
        let slot = match field {
            "InstanceType" => 0,
            "SubnetId" => 1,
            "AvailabilityZone" => 2,
            _ => continue,
        };
        if prefix.contains(".Overrides.") {
            by_prefix.entry(prefix.to_owned()).or_default()[slot] = value.to_owned();
        }
    }
    by_prefix.into_values().map(|[t, s, z]| (t, s, z)).collect()
}

/// The canned answer for a random fault of `action`, or `None` when the fault is not an
/// answer (dropped, slow).
fn random_answer(
    kind: RandomFault,
    action: &str,
    json: bool,
    body: &[u8],
    rng: &mut fastrand::Rng,
) -> Option<Fault> {
    let json_error = |status: u16, kind: &str| Fault {
        action: action.to_owned(),
        status,
        body: format!("{{\"__type\":\"{kind}\",\"message\":\"injected by the test proxy\"}}"),
        times: None,
    };
    match kind {
        RandomFault::InsufficientCapacity if action == "CreateFleet" => {
            let overrides = fleet_overrides(body);
            let refs: Vec<(&str, &str, &str)> = overrides
                .get(rng.usize(..overrides.len().max(1)))
                .map(|(t, s, z)| (t.as_str(), s.as_str(), z.as_str()))
                .into_iter()
                .collect();
            Some(Fault::create_fleet_errors(
                "InsufficientInstanceCapacity",
                &refs,
                None,
            ))
        }
        RandomFault::InsufficientCapacity | RandomFault::Throttled => Some(if json {
            json_error(400, "ThrottlingException")
        } else {
            Fault::ec2_error(action, 503, "RequestLimitExceeded", None)
        }),
        RandomFault::ServerError => Some(if json {
            json_error(500, "InternalFailure")
        } else {
            Fault::ec2_error(action, 500, "InternalError", None)
        }),
        RandomFault::Dropped | RandomFault::Slow => None,
    }
}

/// An HTTP proxy in front of moto that answers matching actions with canned faults and
/// forwards everything else. It stops when dropped.
pub struct FaultProxy {
    listening: Listening,
    state: Arc<Mutex<ProxyState>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.listening.fmt(f)
    }
}

impl FaultProxy {
    /// Starts it on a free port of 127.0.0.1.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let listening = listen(upstream, state.clone(), serve).await;
        FaultProxy { listening, state }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.listening.endpoint()
    }

    /// Adds a fault.
    pub fn inject(&self, fault: Fault) {
        if let Ok(mut s) = self.state.lock() {
            s.faults.push(fault);
        }
    }

    /// Removes every fault, canned and random.
    pub fn clear(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.faults.clear();
            s.random = None;
            s.stale = None;
        }
    }

    /// From now on, answers each request that no canned fault matches with a random fault
    /// (drawn uniformly from [`RandomFault::ALL`]) with probability `rate`, seeded.
    pub fn random(&self, rate: f64, seed: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.random = Some(RandomFaults {
                rate,
                rng: fastrand::Rng::with_seed(seed),
            });
        }
    }

    /// From now on, DescribeInstances answers show each instance, for `window` after the
    /// proxy first sees it, without its NodeClaim tag, without its launch time, or without
    /// both (in turn): what EC2's eventually consistent reads can answer right after
    /// CreateFleet.
    pub fn stale_listings(&self, window: Duration) {
        if let Ok(mut s) = self.state.lock() {
            s.stale = Some(StaleListings {
                window,
                first_seen: HashMap::new(),
                shown_stale: 0,
            });
        }
    }

    /// Instances shown without their NodeClaim tag or launch time so far.
    pub fn shown_stale(&self) -> usize {
        self.state
            .lock()
            .map_or(0, |s| s.stale.as_ref().map_or(0, |l| l.shown_stale))
    }

    /// Random faults injected so far, by kind.
    pub fn random_injected(&self) -> BTreeMap<RandomFault, usize> {
        self.state
            .lock()
            .map_or_else(|_| BTreeMap::new(), |s| s.random_injected.clone())
    }

    /// Requests seen for an action (answered or forwarded).
    pub fn hits(&self, action: &str) -> usize {
        self.state
            .lock()
            .map_or(0, |s| s.hits.get(action).copied().unwrap_or(0))
    }

    /// Requests seen, of every action.
    pub fn total_hits(&self) -> usize {
        self.state.lock().map_or(0, |s| s.hits.values().sum())
    }

    /// Requests of an action answered with a fault.
    pub fn injected(&self, action: &str) -> usize {
        self.state
            .lock()
            .map_or(0, |s| s.injected.get(action).copied().unwrap_or(0))
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(crate) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn action_of(head: &str, body: &[u8]) -> String {
    if let Some(target) = header(head, "x-amz-target") {
        return target.rsplit('.').next().unwrap_or(target).to_owned();
    }
    // EKS is REST: `GET /clusters/NAME` is DescribeCluster.
    let mut request_line = head.split("\r\n").next().unwrap_or_default().split(' ');
    if let (Some("GET"), Some(path)) = (request_line.next(), request_line.next())
        && let Some(name) = path.strip_prefix("/clusters/")
        && !name.is_empty()
        && !name.contains('/')
    {
        return "DescribeCluster".to_owned();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn without_connection_header(head: &str) -> String {
    head.split("\r\n")
        .filter(|l| {
            !l.split(':')
                .next()
                .is_some_and(|k| k.trim().eq_ignore_ascii_case("connection"))
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// A proxy listening on 127.0.0.1; it stops when dropped.
pub(crate) struct Listening {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Listening {
    /// `http://127.0.0.1:PORT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens on a free port of 127.0.0.1 and serves each connection with `serve` (given the
/// upstream and the shared state) until dropped.
pub(crate) async fn listen<S, F, Fut>(
    upstream: SocketAddr,
    state: Arc<Mutex<S>>,
    serve: F,
) -> Listening
where
    S: Send + 'static,
    F: Fn(TcpStream, SocketAddr, Arc<Mutex<S>>) -> Fut + Send + Copy + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let addr = listener.local_addr().expect("proxy address");
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let _ = serve(client, upstream, state).await;
            });
        }
    });
    Listening { addr, task }
}

/// One HTTP/1.1 request read whole from a client: its head (without the blank line) and its
/// body. `None` when the client closed the connection first.
pub(crate) async fn read_request(
    client: &mut TcpStream,
) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some((head, body)))
}

/// Sends a request upstream on a connection of its own and returns the answer's head and
/// body (`None` for the head when the answer has none).
pub(crate) async fn exchange(
    upstream: SocketAddr,
    head: &str,
    body: &[u8],
) -> std::io::Result<(Option<String>, Vec<u8>)> {
    let mut server = TcpStream::connect(upstream).await?;
    let forwarded_head = format!(
        "{}\r\nConnection: close\r\n\r\n",
        without_connection_header(head)
    );
    server.write_all(forwarded_head.as_bytes()).await?;
    server.write_all(body).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    Ok(match find(&response, b"\r\n\r\n") {
        Some(at) => {
            let head = String::from_utf8_lossy(&response[..at]).into_owned();
            (
                Some(without_connection_header(&head)),
                response[at + 4..].to_vec(),
            )
        }
        None => (None, response),
    })
}

/// Writes an answer to the client, saying the connection ends with it (as it does), and
/// closes the connection.
pub(crate) async fn answer(
    client: &mut TcpStream,
    head: Option<&str>,
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = match head {
        Some(head) => format!("{head}\r\nConnection: close\r\n\r\n").into_bytes(),
        None => Vec::new(),
    };
    out.extend_from_slice(body);
    client.write_all(&out).await?;
    client.shutdown().await
}

/// Replaces a response head's Content-Length with `length`.
pub(crate) fn with_content_length(head: &str, length: usize) -> String {
    head.split("\r\n")
        .map(|l| match l.split_once(':') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("content-length") => {
                format!("Content-Length: {length}")
            }
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
) -> std::io::Result<()> {
    let Some((head, body)) = read_request(&mut client).await? else {
        return Ok(());
    };
    let action = action_of(&head, &body);
    let fault = {
        let mut s = state
            .lock()
            .map_err(|_| std::io::Error::other("proxy state poisoned"))?;
        *s.hits.entry(action.clone()).or_default() += 1;
        let index = s
            .faults
            .iter()
            .position(|f| f.action == action && f.times != Some(0));
        let canned = index.map(|i| {
            if let Some(times) = s.faults[i].times.as_mut() {
                *times -= 1;
            }
            s.faults[i].clone()
        });
        let mut random = None;
        if canned.is_none()
            && let Some(r) = s.random.as_mut()
            && r.rng.f64() < r.rate
        {
            random = Some(RandomFault::ALL[r.rng.usize(..RandomFault::ALL.len())]);
        }
        if let Some(kind) = random {
            *s.random_injected.entry(kind).or_default() += 1;
        }
        if canned.is_some() || random.is_some() {
            *s.injected.entry(action.clone()).or_default() += 1;
        }
        let json = header(&head, "x-amz-target").is_some();
        let answer = match (canned, random, s.random.as_mut()) {
            (Some(canned), _, _) => Some(canned),
            (None, Some(kind), Some(r)) => random_answer(kind, &action, json, &body, &mut r.rng),
            _ => None,
        };
        (answer, random)
    };
    let (fault, random) = fault;
    match random {
        Some(RandomFault::Dropped) => return client.shutdown().await,
        Some(RandomFault::Slow) => tokio::time::sleep(Duration::from_secs(2)).await,
        _ => {}
    }
    if let Some(fault) = fault {
        return answer_fault(&mut client, &fault).await;
    }
    let (head, mut body) = exchange(upstream, &head, &body).await?;
    let mut head = head;
    if action == "DescribeInstances"
        && let Some(h) = head.as_mut()
        && header(h, "content-length").is_some()
        && let Ok(mut s) = state.lock()
        && let Some(stale) = s.stale.as_mut()
    {
        body = stale.rewrite(&String::from_utf8_lossy(&body)).into_bytes();
        *h = with_content_length(h, body.len());
    }
    answer(&mut client, head.as_deref(), &body).await
}

/// Answers with a canned fault and closes the connection.
pub(crate) async fn answer_fault(client: &mut TcpStream, fault: &Fault) -> std::io::Result<()> {
    let content_type = if fault.body.starts_with('{') {
        "application/x-amz-json-1.1"
    } else if fault.body.contains("<Error><Code>") && !fault.body.contains("<Response>") {
        "application/xml"
    } else {
        "text/xml"
    };
    let head = format!(
        "HTTP/1.1 {} Injected\r\nContent-Type: {content_type}\r\nContent-Length: {}",
        fault.status,
        fault.body.len(),
    );
    answer(client, Some(&head), fault.body.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(id: &str, nodeclaim: &str) -> String {
        format!(
            "<item><architecture>x86_64</architecture><blockDeviceMapping><item><ebs><attachTime>t</attachTime></ebs></item></blockDeviceMapping><tagSet><item><key>karpenter.sh/nodepool</key><value>default</value></item><item><key>karpenter.sh/nodeclaim</key><value>{nodeclaim}</value></item></tagSet><instanceId>{id}</instanceId><launchTime>2026-11-27T22:59:00.000Z</launchTime></item>"
        )
    }

    #[test]
    fn stale_listings_hide_tag_launch_time_or_both_for_their_window_only() {
        let body = format!(
            "<DescribeInstancesResponse><reservationSet><item><reservationId>r-1</reservationId><instancesSet>{}{}</instancesSet></item><item><instancesSet>{}</instancesSet></item></reservationSet></DescribeInstancesResponse>",
            instance("i-1", "a"),
            instance("i-2", "b"),
            instance("i-3", "c"),
        );
        assert_eq!(instance_items(&body).len(), 3);
        let mut stale = StaleListings {
            window: Duration::from_secs(60),
            first_seen: HashMap::new(),
            shown_stale: 0,
        };
        let out = stale.rewrite(&body);
        let items: Vec<&str> = instance_items(&out)
            .into_iter()
            .map(|(a, b)| &out[a..b])
            .collect();
        assert_eq!(items.len(), 3);
        let shown: Vec<(Option<&str>, bool, bool)> = items
            .iter()
            .map(|i| {
                (
                    element_text(i, "instanceId"),
                    i.contains("karpenter.sh/nodeclaim"),
                    i.contains("<launchTime>"),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (Some("i-1"), false, true),
                (Some("i-2"), true, false),
                (Some("i-3"), false, false),
            ]
        );
        assert!(out.contains("karpenter.sh/nodepool"), "other tags stay");
        assert!(out.contains("<attachTime>"), "other times stay");
        assert_eq!(stale.shown_stale, 3);
        // Past its window an instance is shown whole again.
        stale.window = Duration::ZERO;
        assert_eq!(stale.rewrite(&body), body);
    }
}
