//! `controller`: the autoscaler against a Kubernetes cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_actors::actor::Settings;
use karpenter_rs::kube::controller::{
    ControllerCloud, ControllerOptions, JournalBucket, LeaderElection, SimKubelets, Stopped,
    connect, run,
};

use super::parse_duration;

/// Options of `controller`.
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// Kubeconfig file; without it, the files KUBECONFIG lists, ~/.kube/config or the
    /// in-cluster service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (its current context when absent).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Requests a second the controller sends the API server, sustained.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = karpenter_rs::kube::throttle::DEFAULT_QPS, value_name = "QPS")]
    pub kube_client_qps: f64,
    /// Requests the controller sends the API server at once, after a quiet spell.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = karpenter_rs::kube::throttle::DEFAULT_BURST, value_name = "N")]
    pub kube_client_burst: u32,
    /// Where nodes come from (`--cloud sim`: simulated Nodes kept Ready as kwok does, so the
    /// controller runs end to end without AWS; `--cloud aws`: EC2), and the AWS settings.
    #[command(flatten)]
    pub aws: super::aws::AwsArgs,
    /// How long a simulated instance takes to register its Node (`--cloud sim`).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub sim_boot_delay: Duration,
    /// Who plays the simulated Nodes' kubelets (`--cloud sim`): this process, or a
    /// `karpenter sim-nodes` process beside it (`external`; its --boot-delay replaces
    /// --sim-boot-delay).
    #[arg(long, value_enum, default_value_t = SimKubelets::InProcess)]
    pub sim_kubelets: SimKubelets,
    /// Journal directory (the flight recorder).
    #[arg(
        long,
        env = "JOURNAL_DIR",
        value_name = "DIR",
        default_value = "karpenter-journal"
    )]
    pub journal: PathBuf,
    /// When the journal cannot be opened or replayed (damaged, or written by a newer
    /// karpenter), move it aside to DIR.damaged-<unix seconds> and start a new one instead of
    /// refusing to start. NodeClaims are adopted from the cluster either way.
    #[arg(long, env = "DISCARD_DAMAGED_JOURNAL", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub discard_damaged_journal: bool,
    /// Keep the journal's history in S3 as well (BUCKET or BUCKET/PREFIX; this cluster's
    /// under PREFIX/<cluster-name>/): sealed segments shipped every minute and on a clean
    /// stop, and a new leader continues the history stored there (docs/journal-bucket.md).
    #[arg(long, env = "JOURNAL_BUCKET", value_name = "BUCKET[/PREFIX]")]
    pub journal_bucket: Option<String>,
    /// How often the journal is shipped to --journal-bucket: a killed leader loses at most
    /// this much history from the bucket.
    #[arg(long, env = "JOURNAL_SHIP_INTERVAL", default_value = "1m", value_parser = parse_duration, value_name = "DURATION")]
    pub journal_ship_interval: Duration,
    /// Batching windows and scheduling policies.
    #[command(flatten)]
    pub scheduling: super::simulate::SchedulingArgs,
    /// Give up when the caches have not synced by then.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub cache_sync_timeout: Duration,
    /// Port of /metrics (Prometheus), served without authentication.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Address /metrics listens on: loopback unless told otherwise (in a pod, 0.0.0.0 so
    /// Prometheus reaches it; the chart sets that).
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "127.0.0.1")]
    pub metrics_bind_address: std::net::IpAddr,
    /// Port of /healthz and /readyz, served without authentication.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Address /healthz and /readyz listen on: loopback unless told otherwise (in a pod,
    /// 0.0.0.0 so the kubelet reaches them; the chart sets that).
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = "127.0.0.1")]
    pub health_probe_bind_address: std::net::IpAddr,
    /// Act at once instead of electing a leader among replicas.
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub disable_leader_election: bool,
    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// Namespace of the leader election Lease; the pod's own namespace when empty.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// Serve the admin endpoint (actor state) on this address, e.g. 127.0.0.1:8090.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Token the admin endpoint and its page require: `Authorization: Bearer TOKEN`, or a
    /// browser login with the token as password (mandatory off loopback).
    #[arg(
        long,
        env = "ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
}

pub fn controller(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    // Flags are checked before anything is contacted.
    let mut cloud = cloud(&args, args.sim_boot_delay)?;
    if let ControllerCloud::Aws(setup) = &mut cloud {
        setup.settings.reserved_capacity = args.scheduling.feature_gates.reserved_capacity;
    }
    let probes = probe_addresses(&args)?;
    let admin = args.admin.map(|addr| karpenter_rs::admin::AdminOptions {
        addr,
        token: args.admin_token.clone(),
    });
    if let Some(admin) = &admin {
        admin.check()?;
    }
    let journal_bucket = journal_bucket(&args)?;
    let limits =
        karpenter_rs::kube::throttle::Limits::new(args.kube_client_qps, args.kube_client_burst)
            .map_err(anyhow::Error::msg)?;
    let stopped = runtime.block_on(async move {
        let client = connect(args.kubeconfig.as_deref(), args.context.as_deref(), limits).await?;
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("karpenter-{}", std::process::id()));
        let options = ControllerOptions {
            journal_dir: args.journal,
            discard_damaged_journal: args.discard_damaged_journal,
            settings: Settings {
                nodeclaim_name_seed: jiff::Timestamp::now().as_nanosecond() as u64,
                ..args.scheduling.settings()
            },
            cloud,
            gc: Default::default(),
            journal_bucket,
            sync_timeout: args.cache_sync_timeout,
            scope: "controller".into(),
            identity,
            admin,
            probes,
            leader_election: (!args.disable_leader_election).then(|| LeaderElection {
                namespace: if args.leader_election_namespace.is_empty() {
                    own_namespace()
                } else {
                    args.leader_election_namespace.clone()
                },
                name: args.leader_election_name.clone(),
                timing: Default::default(),
            }),
        };
        // Kubernetes stops a pod with SIGTERM: stop acting and release the Lease, so a
        // follower takes over at once instead of after the lease duration.
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("cannot listen for SIGTERM")?;
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        };
        run(client, options, shutdown).await
    })?;
    match stopped {
        Stopped::Shutdown => Ok(ExitCode::SUCCESS),
        // Exit so the Deployment restarts this replica as a candidate with fresh state.
        Stopped::LeadershipLost => Ok(ExitCode::from(3)),
    }
}

/// The cloud the flags choose. EC2 nodes join the API server named by `--cluster-endpoint`
/// (else the EKS cluster's), trusting `--cluster-ca-bundle` or, in a pod, the service
/// account's CA.
fn cloud(args: &ControllerArgs, boot_delay: Duration) -> anyhow::Result<ControllerCloud> {
    let aws = &args.aws;
    let Some(mut run) = aws.run_with(super::aws::given(&args.journal_bucket).is_some())? else {
        return Ok(ControllerCloud::Sim {
            region: aws.region().unwrap_or_else(|| "us-west-2".into()),
            boot_delay,
            kubelets: args.sim_kubelets,
        });
    };
    if run.cluster.ca_bundle.is_none()
        && let Ok(pem) = std::fs::read(SERVICE_ACCOUNT_CA)
    {
        use base64::Engine as _;
        run.cluster.ca_bundle = Some(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    Ok(ControllerCloud::Aws(Box::new(run)))
}

/// Where the journal's history goes (`--journal-bucket`), checked before anything runs.
fn journal_bucket(args: &ControllerArgs) -> anyhow::Result<Option<JournalBucket>> {
    let Some(spec) = super::aws::given(&args.journal_bucket) else {
        return Ok(None);
    };
    let location = karpenter_aws::history::HistoryLocation::parse(&spec)
        .map_err(|e| anyhow::anyhow!("--journal-bucket (JOURNAL_BUCKET): {e}"))?;
    let cluster = args.aws.cluster_name.clone();
    let region = args.aws.region().unwrap_or_else(|| "us-west-2".into());
    let connection = super::aws::connection(&region, args.aws.aws_endpoint().as_deref())?;
    if args.journal_ship_interval < Duration::from_secs(1) {
        anyhow::bail!(
            "--journal-ship-interval {:?}: give at least 1s (every pass lists the bucket)",
            args.journal_ship_interval
        );
    }
    Ok(Some(JournalBucket {
        location: location.for_cluster(&cluster),
        connection,
        cluster,
        ship_every: args.journal_ship_interval,
    }))
}

const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// The namespace this pod runs in (from its service account), else `kube-system`.
fn own_namespace() -> String {
    std::env::var("SYSTEM_NAMESPACE")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok()
        })
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kube-system".to_owned())
}

/// Where the probes and metrics are served: one listener per distinct address (both serve
/// every endpoint), refusing one port asked for on two different addresses.
fn probe_addresses(args: &ControllerArgs) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    let metrics = std::net::SocketAddr::new(args.metrics_bind_address, args.metrics_port);
    let health = std::net::SocketAddr::new(args.health_probe_bind_address, args.health_probe_port);
    if metrics.port() == health.port() && metrics.ip() != health.ip() {
        anyhow::bail!(
            "--metrics-port and --health-probe-port are both {} but --metrics-bind-address ({}) and --health-probe-bind-address ({}) differ: give them different ports or the same address",
            metrics.port(),
            metrics.ip(),
            health.ip()
        );
    }
    let mut out = vec![metrics];
    if health != metrics {
        out.push(health);
    }
    Ok(out)
}
