//! Test support for the AWS side, behind the `testing` feature (only tests turn it on): the
//! moto emulator (a real third-party EC2/SSM/SQS/IAM/Auto Scaling API server) started on
//! 127.0.0.1, test settings and connections, and a fault-injecting proxy for what moto cannot
//! do. Used by this crate's integration tests and by the end-to-end tests of the `karpenter`
//! binary.
//!
//! moto cannot refuse capacity, throttle, fail with 5xx, or answer DescribeInstances as
//! EC2's eventually consistent reads can right after a launch; the [`FaultProxy`] does:
//! canned faults per action, a seeded random mix (insufficient capacity, throttling, 5xx,
//! dropped connections, 2 s late answers), and stale listings (new instances shown without
//! their NodeClaim tag or launch time for a while). It does not make a call time out (API
//! calls allow 20 s per attempt and SQS calls 40 s, so that a long poll of 20 s fits), nor
//! answer with partial bodies. moto answers DescribeImages for an AMI that does not exist
//! with nothing where EC2 fails the call (`InvalidAMIID.NotFound`), so the Auto Scaling
//! reader's fallback of asking for each AMI alone is not exercised on it.
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, ResourceType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::{Clients, Connection};
use crate::ec2::tag_specifications;
use crate::error::AwsError;
use crate::nodeclass::AmiLookup;

pub use crate::emulator::{Fixture, KUBERNETES_VERSION, SSM_PREFIX, create_queue};
pub use autoscaling::{NodeGroupSpec, create_node_group, register_image};

mod autoscaling;

/// The moto version the test command installs.
pub const MOTO_VERSION: &str = "5.2.1";
/// Region the tests use.
pub const REGION: &str = "us-west-2";

// Starts moto in a child that stops it when our end of its stdin closes, which happens
// when this process exits for any reason (even SIGKILL), so no emulator outlives a test run.
const SUPERVISOR: &str = r#"
import subprocess, sys
server = subprocess.Popen([sys.executable, "-c", sys.argv[2], "-H", "127.0.0.1", "-p", sys.argv[1]])
try:
    sys.stdin.read()
finally:
    server.terminate()
    try:
        server.wait(10)
    except Exception:
        server.kill()
"#;

/// moto's server with the changes that make it do what EC2 does where we depend on it.
const MOTO_SERVER: &str = include_str!("../../scripts/moto_server.py");
/// Where the modules moto_server.py imports live (moto_reservations.py).
const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
/// What the emulated Pricing API answers from until a test says otherwise: the embedded
/// table's list prices.
const PRICES_CSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../core/data/aws/on-demand-prices.csv"
);

/// A running moto server.
pub struct Moto {
    port: u16,
    child: Mutex<Child>,
    /// Closing it makes the supervisor stop the server (and then itself).
    stdin: Mutex<Option<ChildStdin>>,
}

impl std::fmt::Debug for Moto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Moto").field("port", &self.port).finish()
    }
}

/// A port on 127.0.0.1 nothing listens on now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn http(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    http_body(port, method, path, "")
}

fn http_body(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<u16> {
    http_exchange(port, method, path, body).map(|(status, _)| status)
}

/// Sends one request; answers the status and the body.
fn http_exchange(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = StdStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(&stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let rest = String::from_utf8_lossy(&rest);
    let body = rest
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

impl Moto {
    /// Starts moto on a free port with instance-type and AMI validation on, and waits until
    /// it answers (at most 60 s).
    pub fn start() -> Moto {
        let port = free_port();
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg(port.to_string())
            .arg(MOTO_SERVER)
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
            .env("MOTO_PRICING_CSV", PRICES_CSV)
            .env("PYTHONPATH", SCRIPTS)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 must be installed to run moto");
        let stdin = child.stdin.take().expect("piped stdin");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http(port, "GET", "/moto-api/").is_ok_and(|s| s == 200) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "moto_server exited ({status}); install it with `pip install 'moto[server]=={MOTO_VERSION}'` (./scripts/test.sh does)"
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer on 127.0.0.1:{port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Moto {
            port,
            child: Mutex::new(child),
            stdin: Mutex::new(Some(stdin)),
        }
    }

    /// The one moto server of this test process, started on first use.
    pub fn shared() -> &'static Moto {
        static MOTO: OnceLock<Moto> = OnceLock::new();
        MOTO.get_or_init(Moto::start)
    }

    /// Serialises the tests of one process that share the server (each resets it).
    pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
        static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        LOCK.lock().await
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Makes the Pricing API answer `prices` (type → USD/hour) for `region`, or the table's
    /// again with `None`, until the next reset.
    pub fn set_prices(&self, region: &str, prices: Option<&BTreeMap<String, f64>>) {
        let body = serde_json::json!({"region": region, "prices": prices}).to_string();
        let status =
            http_body(self.port, "POST", "/_karpenter/pricing", &body).expect("moto pricing hook");
        assert_eq!(status, 200, "moto pricing hook answered {status}");
    }

    /// Makes every GetProducts fail with `code` (`None`: answer again), until the next reset.
    pub fn fail_pricing(&self, code: Option<&str>) {
        let body = serde_json::json!({ "fail": code }).to_string();
        let status =
            http_body(self.port, "POST", "/_karpenter/pricing", &body).expect("moto pricing hook");
        assert_eq!(status, 200, "moto pricing hook answered {status}");
    }

    /// A Capacity Block of `count` × `instance_type` in `zone` of [`REGION`], ending at
    /// `end_epoch_s`, with `tags` (EC2 sells them through PurchaseCapacityBlock; moto's shim
    /// makes one directly). Answers its id.
    pub fn capacity_block(
        &self,
        instance_type: &str,
        zone: &str,
        count: u32,
        end_epoch_s: i64,
        tags: &BTreeMap<String, String>,
    ) -> String {
        let body = serde_json::json!({
            "region": REGION, "instanceType": instance_type, "availabilityZone": zone,
            "count": count, "endDate": end_epoch_s, "tags": tags,
        })
        .to_string();
        let (status, answer) =
            http_exchange(self.port, "POST", "/_karpenter/capacity-block", &body)
                .expect("moto capacity-block hook");
        assert_eq!(
            status, 200,
            "moto capacity-block hook answered {status}: {answer}"
        );
        let answer: serde_json::Value = serde_json::from_str(&answer).expect("a JSON answer");
        answer["id"].as_str().expect("an id").to_owned()
    }

    /// Clears every resource (`POST /moto-api/reset`).
    pub fn reset(&self) {
        let status = http(self.port, "POST", "/moto-api/reset").expect("moto reset");
        assert_eq!(status, 200, "moto reset answered {status}");
    }
}

impl Drop for Moto {
    /// Stops the server: the supervisor, its stdin closed, terminates it and waits for it
    /// (killing it after 10 s). Killing the supervisor itself would leave the server running.
    fn drop(&mut self) {
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
        if let Ok(mut child) = self.child.lock() {
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// AMI aliases looked up under [`SSM_PREFIX`] for [`KUBERNETES_VERSION`].
pub fn ami_lookup() -> AmiLookup {
    AmiLookup {
        ssm_prefix: SSM_PREFIX.into(),
        kubernetes_version: KUBERNETES_VERSION.into(),
    }
}

/// Provider settings for `cluster` in [`REGION`]: nodes join `https://<cluster>.example`,
/// AMI aliases resolve through [`ami_lookup`].
pub fn settings(cluster: &str) -> crate::provider::AwsSettings {
    crate::provider::AwsSettings {
        cluster: crate::bootstrap::ClusterInfo {
            name: cluster.into(),
            endpoint: format!("https://{cluster}.example"),
            ca_bundle: None,
            service_cidr: None,
        },
        region: REGION.into(),
        vm_memory_overhead_permille: 75,
        nodeclass_refresh: Duration::from_secs(60),
        catalog_refresh: Duration::from_secs(3600),
        ami_lookup: ami_lookup(),
        reserved_capacity: true,
    }
}

/// A connection to `endpoint` with test credentials (moto accepts any).
pub fn connection(endpoint: &str) -> Connection {
    let mut c = Connection::new(REGION);
    c.endpoint = Some(endpoint.to_owned());
    c.static_credentials = Some(("testing".into(), "testing".into()));
    c.initial_backoff = Duration::from_millis(20);
    c
}

/// Creates the S3 bucket `name` in [`REGION`] (a journal bucket, as the CloudFormation
/// template makes it).
pub async fn create_bucket(connection: &Connection, name: &str) -> Result<(), String> {
    let config = crate::config::sdk_config(connection).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .force_path_style(true)
            .build(),
    );
    s3.create_bucket()
        .bucket(name)
        .create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(REGION))
                .build(),
        )
        .send()
        .await
        .map(drop)
        .map_err(|e| format!("cannot create bucket {name}: {e:?}"))
}

/// Creates a targeted On-Demand Capacity Reservation of `count` × `instance_type` (Linux)
/// in `zone`, tagged `tags`; returns its id.
pub async fn create_capacity_reservation(
    clients: &Clients,
    instance_type: &str,
    zone: &str,
    count: i32,
    tags: &BTreeMap<String, String>,
) -> Result<String, AwsError> {
    let out = clients
        .ec2
        .create_capacity_reservation()
        .instance_type(instance_type)
        .instance_platform(aws_sdk_ec2::types::CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone(zone)
        .instance_count(count)
        .instance_match_criteria(aws_sdk_ec2::types::InstanceMatchCriteria::Targeted)
        .set_tag_specifications(Some(tag_specifications(
            &[ResourceType::CapacityReservation],
            tags,
        )))
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateCapacityReservation", e))?;
    out.capacity_reservation()
        .and_then(|r| r.capacity_reservation_id())
        .map(str::to_owned)
        .ok_or_else(|| {
            AwsError::new(
                "CreateCapacityReservation",
                "NoId",
                "the answer names no reservation",
            )
        })
}

/// Launches an instance tagged as this cluster's, for a NodeClaim that does not exist (what
/// a crash between the cloud call and the journal leaves behind); returns its id.
pub async fn launch_unowned_instance(
    clients: &Clients,
    fixture: &Fixture,
    nodeclaim: &str,
) -> Result<String, AwsError> {
    let tags: BTreeMap<String, String> = [
        (
            format!("kubernetes.io/cluster/{}", fixture.cluster),
            "owned".to_owned(),
        ),
        ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
        ("karpenter.sh/nodeclaim".to_owned(), nodeclaim.to_owned()),
    ]
    .into();
    launch_tagged_instance(clients, fixture, &tags)
        .await
        .map(|(id, _)| id)
}

/// Launches an m5.large in the fixture's first subnet with `tags` (as another controller
/// would have); returns its id and zone.
pub async fn launch_tagged_instance(
    clients: &Clients,
    fixture: &Fixture,
    tags: &BTreeMap<String, String>,
) -> Result<(String, String), AwsError> {
    let subnet =
        fixture.subnets.values().next().ok_or_else(|| {
            AwsError::new("RunInstances", "NoSubnet", "the fixture has no subnet")
        })?;
    let out = clients
        .ec2
        .run_instances()
        .image_id(fixture.amis.get("x86_64").cloned().unwrap_or_default())
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .set_tag_specifications(Some(tag_specifications(&[ResourceType::Instance], tags)))
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("RunInstances", e))?;
    let instance = out
        .instances()
        .first()
        .ok_or_else(|| AwsError::new("RunInstances", "NoInstance", "no instance in the answer"))?;
    let id = instance.instance_id().unwrap_or_default().to_owned();
    let zone = instance
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default()
        .to_owned();
    Ok((id, zone))
}

/// States of the instances tagged for `cluster`, by id.
pub async fn instance_states(
    clients: &Clients,
    cluster: &str,
) -> Result<BTreeMap<String, String>, AwsError> {
    Ok(instance_claims(clients, cluster)
        .await?
        .into_iter()
        .map(|(id, (state, _))| (id, state))
        .collect())
}

/// The instances tagged for `cluster`, by id: their state and the NodeClaim they are tagged
/// with (empty when none).
pub async fn instance_claims(
    clients: &Clients,
    cluster: &str,
) -> Result<BTreeMap<String, (String, String)>, AwsError> {
    let out = clients
        .ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{cluster}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeInstances", e))?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            let claim = i
                .tags()
                .iter()
                .find(|t| t.key() == Some(crate::provider::tags::NODECLAIM))
                .and_then(|t| t.value())
                .unwrap_or_default();
            Some((
                i.instance_id()?.to_owned(),
                (i.state()?.name()?.as_str().to_owned(), claim.to_owned()),
            ))
        })
        .collect())
}

/// Names of the launch templates tagged for `cluster`.
pub async fn launch_template_names(
    clients: &Clients,
    cluster: &str,
) -> Result<Vec<String>, AwsError> {
    let out = clients
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/cluster")
                .values(cluster)
                .build(),
        )
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeLaunchTemplates", e))?;
    Ok(out
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_owned))
        .collect())
}

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
    addr: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FaultProxy {
    /// Starts it on a free port of 127.0.0.1.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let _ = serve(client, upstream, state).await;
                });
            }
        });
        FaultProxy { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
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

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn action_of(head: &str, body: &[u8]) -> String {
    if let Some(target) = header(head, "x-amz-target") {
        return target.rsplit('.').next().unwrap_or(target).to_owned();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .unwrap_or_default()
        .to_owned()
}

fn without_connection_header(head: &str) -> String {
    head.split("\r\n")
        .filter(|l| {
            !l.split(':')
                .next()
                .is_some_and(|k| k.trim().eq_ignore_ascii_case("connection"))
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<ProxyState>>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
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
        let content_type = if fault.body.starts_with('{') {
            "application/x-amz-json-1.1"
        } else {
            "text/xml"
        };
        let response = format!(
            "HTTP/1.1 {} Injected\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            fault.status,
            fault.body.len(),
            fault.body
        );
        client.write_all(response.as_bytes()).await?;
        return client.shutdown().await;
    }
    let mut server = TcpStream::connect(upstream).await?;
    let forwarded_head = format!(
        "{}\r\nConnection: close\r\n\r\n",
        without_connection_header(&head)
    );
    server.write_all(forwarded_head.as_bytes()).await?;
    server.write_all(&body).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    // Tell the client this connection ends with the response, as it does.
    let response = match find(&response, b"\r\n\r\n") {
        Some(at) => {
            let head = String::from_utf8_lossy(&response[..at]).into_owned();
            let mut body = response[at + 4..].to_vec();
            let mut head = without_connection_header(&head);
            if action == "DescribeInstances"
                && header(&head, "content-length").is_some()
                && let Ok(mut s) = state.lock()
                && let Some(stale) = s.stale.as_mut()
            {
                body = stale.rewrite(&String::from_utf8_lossy(&body)).into_bytes();
                head = head
                    .split("\r\n")
                    .map(|l| match l.split_once(':') {
                        Some((k, _)) if k.trim().eq_ignore_ascii_case("content-length") => {
                            format!("Content-Length: {}", body.len())
                        }
                        _ => l.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join("\r\n");
            }
            let mut out = format!("{head}\r\nConnection: close\r\n\r\n").into_bytes();
            out.extend_from_slice(&body);
            out
        }
        None => response,
    };
    client.write_all(&response).await?;
    client.shutdown().await
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
