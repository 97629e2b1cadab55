//! Test support for the AWS side, behind the `testing` feature (only tests turn it on): the
//! moto emulator (a real third-party EC2/SSM/SQS/IAM/Auto Scaling API server) started on
//! 127.0.0.1, test settings and connections, and a fault-injecting proxy for what moto cannot
//! do. Used by this crate's integration tests and by the end-to-end tests of the `karpenter`
//! binary.
//!
//! moto cannot refuse capacity, throttle, fail with 5xx, or answer DescribeInstances as
//! EC2's eventually consistent reads can right after a launch; the [`FaultProxy`]
//! (`testing/proxy.rs`) does:
//! canned faults per action, a seeded random mix (insufficient capacity, throttling, 5xx,
//! dropped connections, 2 s late answers), and stale listings (new instances shown without
//! their NodeClaim tag or launch time for a while). It does not make a call time out (API
//! calls allow 20 s per attempt and SQS calls 40 s, so that a long poll of 20 s fits), nor
//! answer with partial bodies. moto answers DescribeImages for an AMI that does not exist
//! with nothing where EC2 fails the call (`InvalidAMIID.NotFound`), so the Auto Scaling
//! reader's fallback of asking for each AMI alone is not exercised on it. The
//! [`S3FaultProxy`] does the same for the journal bucket on moto's S3.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, ResourceType};

use crate::config::{Clients, Connection};
use crate::ec2::tag_specifications;
use crate::error::AwsError;
use crate::nodeclass::AmiLookup;

pub use crate::emulator::{Fixture, KUBERNETES_VERSION, SSM_PREFIX, create_queue};
pub use autoscaling::{NodeGroupSpec, create_node_group, register_image};
pub use proxy::{Fault, FaultProxy, RandomFault};
pub use s3::{S3Fault, S3FaultProxy};

mod autoscaling;
mod proxy;
mod s3;

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

/// The cluster `cluster` as flags would give it in full ([`settings`]' endpoint, a CA, the
/// emulator's service CIDR and version), so no run asks EKS.
pub fn known_cluster(cluster: &str) -> crate::cluster::KnownCluster {
    crate::cluster::KnownCluster {
        name: cluster.into(),
        endpoint: Some(format!("https://{cluster}.example")),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some(crate::emulator::SERVICE_CIDR.into()),
        kubernetes_version: Some(KUBERNETES_VERSION.into()),
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
