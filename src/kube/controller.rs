//! `karpenter controller`: the actors against a Kubernetes API server. Watches fill the caches
//! and, once every cache has synced and this replica leads, the supervisor starts with the
//! NodePools the cluster holds and takes over its NodeClaims ([`super::takeover`]); from then
//! on pod, node and NodeClaim changes are routed to the scheduler and the NodeClaim actors,
//! and the actors write NodeClaims, Nodes, evictions and Events back. With EC2 the garbage
//! collector and the interruption queue run too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_actors::actor::Settings;
use karpenter_actors::actor::shipper::Shipping;
use karpenter_actors::handles::System;
use karpenter_core::api::{Validate, unsupported};
use karpenter_core::ports::history::{HistoryError, HistoryStore};
use karpenter_core::ports::{CloudProvider, Cluster, EventObject, InterruptionQueue};
use kube::runtime::events::Reporter;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::cluster::{Caches, KubeCluster};
use super::leader::Elector;
use super::simnodes::{Instances, SimNodes};
use super::takeover::{adopt_nodeclaims, finalize_orphans};
use super::tracker::Signal;
use super::watch;
use crate::simcloud::{InstanceBooted, SimCloud};
use karpenter_aws::provider::AwsCloud;
use karpenter_core::lifecycle::status;

/// Where the nodes come from.
#[derive(Debug, Clone)]
pub enum ControllerCloud {
    /// The in-memory cloud: each launched instance registers a simulated Node in the
    /// cluster after `boot_delay`.
    Sim {
        /// Region whose catalog and prices are used.
        region: String,
        /// How long an instance takes to register its Node.
        boot_delay: Duration,
        /// Who plays the simulated kubelets.
        kubelets: SimKubelets,
    },
    /// EC2 (AWS, or an emulator): instances boot real kubelets, which register their Nodes.
    Aws(Box<crate::system::aws::AwsSetup>),
}

/// Who registers the in-memory cloud's Nodes and plays their kubelets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SimKubelets {
    /// The controller's own process (one process runs everything).
    #[default]
    InProcess,
    /// A `karpenter sim-nodes` process watching the NodeClaims, as KWOK's nodes do: the
    /// controller's memory and CPU are then its own.
    External,
}

/// The cloud's copy of the cluster's EC2NodeClasses: what it launches with, and what tells a
/// NodePool's round whether its node class exists and is not being deleted.
trait NodeClasses: Send + Sync {
    fn set_node_class(&self, class: &karpenter_core::api::EC2NodeClass);
    fn remove_node_class(&self, name: &str);
    fn node_class_names(&self) -> Vec<String>;
}

impl NodeClasses for AwsCloud {
    fn set_node_class(&self, class: &karpenter_core::api::EC2NodeClass) {
        AwsCloud::set_node_class(self, class.clone());
    }
    fn remove_node_class(&self, name: &str) {
        AwsCloud::remove_node_class(self, name);
    }
    fn node_class_names(&self) -> Vec<String> {
        AwsCloud::node_class_names(self)
    }
}

impl NodeClasses for SimCloud {
    fn set_node_class(&self, class: &karpenter_core::api::EC2NodeClass) {
        SimCloud::set_node_class(self, class);
    }
    fn remove_node_class(&self, name: &str) {
        SimCloud::remove_node_class(self, name);
    }
    fn node_class_names(&self) -> Vec<String> {
        SimCloud::node_class_names(self)
    }
}

/// Keeps the cloud's EC2NodeClasses in step with the cluster's.
#[derive(Default)]
struct NodeClassSync {
    /// Name → generation (or resource version) last handed to the cloud.
    seen: std::collections::BTreeMap<String, String>,
}

impl NodeClassSync {
    fn sync(&mut self, provider: &dyn NodeClasses, caches: &Caches) {
        let mut current = std::collections::BTreeSet::new();
        for class in caches.nodeclasses.state() {
            let name = class.metadata.name.clone().unwrap_or_default();
            // Deletion does not change the generation: a class being deleted is a new version.
            let version = class
                .metadata
                .generation
                .map(|g| g.to_string())
                .or_else(|| class.metadata.resource_version.clone())
                .unwrap_or_default()
                + if class.metadata.deletion_timestamp.is_some() {
                    "-deleting"
                } else {
                    ""
                };
            current.insert(name.clone());
            if self.seen.get(&name) != Some(&version) {
                info!(ec2nodeclass = %name, "EC2NodeClass applied.");
                provider.set_node_class(&class);
                self.seen.insert(name, version);
            }
        }
        for name in provider.node_class_names() {
            if !current.contains(&name) {
                info!(ec2nodeclass = %name, "EC2NodeClass deleted.");
                provider.remove_node_class(&name);
                self.seen.remove(&name);
            }
        }
    }
}

/// How often NodePool and EC2NodeClass statuses are brought up to date.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// How often the API server's version is read again (upstream's version poll), so AMI
/// aliases follow a control-plane upgrade.
const VERSION_EVERY: Duration = Duration::from_secs(5 * 60);

/// Writes the NodePool and EC2NodeClass statuses that changed (server-side apply of the
/// status subresource under the controller's field manager).
async fn report_status(
    client: &kube::Client,
    cluster: &KubeCluster,
    caches: &Caches,
    system: &System,
    provider: Option<&AwsCloud>,
) {
    use kube::api::{Patch, PatchParams};
    let ctx = system.context();
    let now = ctx.now();
    let params = PatchParams::apply(super::cluster::FIELD_MANAGER).force();
    let classes: kube::Api<karpenter_core::api::EC2NodeClass> = kube::Api::all(client.clone());
    for class in caches.nodeclasses.state() {
        let name = class.metadata.name.clone().unwrap_or_default();
        let wanted = match provider {
            None => karpenter_core::api::EC2NodeClassStatus {
                conditions: status::simulated_nodeclass_conditions(&class, &now),
                ..Default::default()
            },
            Some(provider) => match provider.resolve(&name).await {
                Ok(resolved) => resolved.status(class.metadata.generation, ctx.journal.now_ms()),
                Err(error) => {
                    warn!(ec2nodeclass = %name, %error, "Resolving the EC2NodeClass failed.");
                    continue;
                }
            },
        };
        let mut wanted = wanted;
        status::put_nodeclass_unsupported(&class, &mut wanted.conditions, &now);
        status::keep_transition_times(&class, &mut wanted.conditions);
        let current = class.status.clone().unwrap_or_default();
        report_unsupported(
            cluster,
            &EventObject::EC2NodeClass(name.clone()),
            &current.conditions,
            &wanted.conditions,
        );
        if current.subnets == wanted.subnets
            && current.security_groups == wanted.security_groups
            && current.amis == wanted.amis
            && current.instance_profile == wanted.instance_profile
            && status::same_conditions(&current.conditions, &wanted.conditions)
        {
            continue;
        }
        let body = serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name}, "status": wanted,
        });
        if let Err(error) = classes
            .patch_status(&name, &params, &Patch::Apply(&body))
            .await
        {
            warn!(ec2nodeclass = %name, %error, "Writing the EC2NodeClass status failed.");
        }
    }
    let pools: kube::Api<karpenter_core::api::NodePool> = kube::Api::all(client.clone());
    let nodes = caches.nodes.state();
    for pool in caches.nodepools.state() {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let class_name = &pool.spec.template.spec.node_class_ref.name;
        let class = caches
            .nodeclasses
            .get(&kube::runtime::reflector::ObjectRef::new(class_name));
        let current = pool.status.clone().unwrap_or_default();
        let class_generation = class.as_ref().and_then(|c| c.metadata.generation);
        let class_changed = current.node_class_observed_generation.is_some()
            && current.node_class_observed_generation != class_generation;
        let registration = match system.nodepool(&name) {
            Some(actor) if class_changed => {
                let _ = actor.node_class_changed();
                None
            }
            Some(actor) => actor
                .status(Duration::from_secs(2))
                .await
                .ok()
                .and_then(|s| s.registration),
            None => None,
        };
        let wanted =
            status::nodepool_status(&pool, &nodes, class.as_deref(), registration.as_ref(), &now);
        report_unsupported(
            cluster,
            &EventObject::NodePool(name.clone()),
            &current.conditions,
            &wanted.conditions,
        );
        if current.resources == wanted.resources
            && current.nodes == wanted.nodes
            && current.node_class_observed_generation == wanted.node_class_observed_generation
            && status::same_conditions(&current.conditions, &wanted.conditions)
        {
            continue;
        }
        let body = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name}, "status": wanted,
        });
        if let Err(error) = pools
            .patch_status(&name, &params, &Patch::Apply(&body))
            .await
        {
            warn!(nodepool = %name, %error, "Writing the NodePool status failed.");
        }
    }
}

/// A Warning Event naming the fields an object sets that karpenter-rs does not act on, when
/// the status about to be written reports them and the current one does not (yet, or not
/// the same ones): once per change, however often the status is reconciled.
fn report_unsupported(
    cluster: &KubeCluster,
    object: &EventObject,
    current: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    wanted: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) {
    let Some(message) = status::unsupported_message(wanted) else {
        return;
    };
    if status::unsupported_message(current) != Some(message) {
        warn!(object = %object, fields = %message, "Fields not acted on yet.");
        cluster.emit_event(object, unsupported::REASON, message);
    }
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Where the journal goes.
    pub journal_dir: PathBuf,
    /// Move a journal that cannot be opened or replayed aside and start a new one, instead
    /// of refusing to start (`--discard-damaged-journal`).
    pub discard_damaged_journal: bool,
    /// Actor timing and policies.
    pub settings: Settings,
    /// The cloud.
    pub cloud: ControllerCloud,
    /// How long to wait for the caches before giving up.
    pub sync_timeout: Duration,
    /// Prefix of actor names (unique per controller in one process).
    pub scope: String,
    /// This replica's identity (Events' reporting instance), e.g. the pod name.
    pub identity: String,
    /// Serve the admin endpoint.
    pub admin: Option<crate::admin::AdminOptions>,
    /// Serve `/healthz`, `/readyz` and `/metrics` on each of these (the metrics and the
    /// health probe ports).
    pub probes: Vec<std::net::SocketAddr>,
    /// Elect a leader among replicas; `None` acts at once (`--disable-leader-election`).
    pub leader_election: Option<LeaderElection>,
    /// Garbage collection of leaked instances and of NodeClaims whose instance is gone.
    pub gc: karpenter_actors::actor::messages::GcSettings,
    /// Ship the journal to S3 and continue the history stored there (`--journal-bucket`).
    pub journal_bucket: Option<JournalBucket>,
}

/// Where the journal's history is kept (`--journal-bucket`).
#[derive(Debug, Clone)]
pub struct JournalBucket {
    /// The cluster's prefix in the bucket.
    pub location: karpenter_aws::history::HistoryLocation,
    /// How to reach S3.
    pub connection: karpenter_aws::config::Connection,
    /// The cluster's name, which the prefix's marker must hold.
    pub cluster: String,
    /// How often the journal is shipped (`--journal-ship-interval`).
    pub ship_every: std::time::Duration,
}

/// How long a new leader retries reaching the journal bucket (throttled, unreachable, an
/// upload torn on the way) before it leads without the stored history.
const TAKEOVER_PATIENCE: Duration = Duration::from_secs(30);

/// Opens the journal; with a bucket, continuing the stored history, with the shipping that
/// keeps it there. What may pass (throttling, an outage, a torn upload) is retried for
/// [`TAKEOVER_PATIENCE`]; then it leads on the local journal alone, without shipping, rather
/// than hold the cluster up (the next takeover continues the stored history, which lacks
/// only this leadership's records). A bucket that does not exist, a missing permission or
/// another cluster's history stops the start, naming the setting.
async fn open_journal(
    options: &ControllerOptions,
    leading: &tokio::sync::watch::Receiver<bool>,
    metrics: &karpenter_actors::metrics::Metrics,
) -> anyhow::Result<(super::journal::Opened, Option<Arc<Shipping>>)> {
    let Some(bucket) = &options.journal_bucket else {
        let opened = super::journal::open(&options.journal_dir, options.discard_damaged_journal)?;
        return Ok((opened, None));
    };
    let store: Arc<dyn HistoryStore> = Arc::new(
        karpenter_aws::history::S3History::connect(&bucket.connection, bucket.location.clone())
            .await,
    );
    let start = super::history::HistoryStart {
        store: store.clone(),
        cluster: bucket.cluster.clone(),
        holder: options.identity.clone(),
    };
    let deadline = tokio::time::Instant::now() + TAKEOVER_PATIENCE;
    let mut pause = Duration::from_secs(1);
    let resumed = loop {
        let error = match super::history::open(
            &options.journal_dir,
            options.discard_damaged_journal,
            &start,
        )
        .await
        {
            Ok(resumed) => break resumed,
            Err(error) => error,
        };
        let Some(passing) = error
            .chain()
            .find_map(|e| e.downcast_ref::<HistoryError>())
            .filter(|e| {
                matches!(
                    e,
                    HistoryError::Throttled { .. } | HistoryError::Unavailable { .. }
                )
            })
        else {
            return Err(error);
        };
        metrics.journal_upload_failed(passing.metric_label());
        if tokio::time::Instant::now() + pause > deadline {
            tracing::error!(%error, location = start.store.location(), "The journal bucket could not be reached to continue its history; leading on this pod's journal alone, without shipping (the next leader continues the stored history).");
            let opened =
                super::journal::open(&options.journal_dir, options.discard_damaged_journal)?;
            return Ok((opened, None));
        }
        warn!(%error, retry_in = ?pause, "Cannot continue the journal's stored history yet; retrying.");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(8));
    };
    let mut shipping = Shipping::new(store, resumed.shipped);
    shipping.every = bucket.ship_every;
    shipping.leading = Some(leading.clone());
    Ok((resumed.opened, Some(Arc::new(shipping))))
}

/// Where the replicas' Lease lives.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Timing.
    pub timing: super::leader::Timing,
}

/// Connects to the API server the kubeconfig (or the in-cluster service account) names.
/// The client does not retry on its own: a `429` from an eviction is the drain's to handle,
/// not something to wait out inside the request.
/// Its requests are held to `limits` ([`super::throttle`]).
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    limits: super::throttle::Limits,
) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig found (--kubeconfig, KUBECONFIG, ~/.kube/config) and not running in a cluster")?,
    };
    // Retries are ours (`retry`): client-go's rules, each attempt throttled and counted.
    config.default_retry = false;
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let builder = kube::client::ClientBuilder::try_from(config)
        .context("cannot build a Kubernetes client")?;
    Ok(builder
        .with_layer(&super::throttle::ThrottleLayer::new(limits, &host))
        .with_layer(&super::retry::RetryLayer::new(&host))
        .build())
}

/// Which version of each NodePool the actors run, so changes in the cache reach them.
#[derive(Default)]
struct NodePoolSync {
    /// Name → (generation, or resource version, last seen; whether it was valid).
    seen: std::collections::BTreeMap<String, (String, bool)>,
}

fn version(pool: &karpenter_core::api::NodePool) -> String {
    pool.metadata
        .generation
        .map(|g| g.to_string())
        .or_else(|| pool.metadata.resource_version.clone())
        .unwrap_or_default()
}

impl NodePoolSync {
    /// What changed since the last call: pools to apply (new or changed, valid, and using
    /// nothing karpenter-rs does not act on in a way that changes what the pool means) and
    /// names to stop planning for (deleted, or changed and now invalid or blocked). Each
    /// invalid version gets one Warning Event naming its problems; fields not acted on are
    /// reported by the status (`report_status`).
    fn changes(
        &mut self,
        caches: &Caches,
        cluster: &KubeCluster,
    ) -> (Vec<karpenter_core::api::NodePool>, Vec<String>) {
        let mut apply = Vec::new();
        let mut remove = Vec::new();
        let mut pools = caches.nodepools.state();
        pools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let current: std::collections::BTreeSet<String> = pools
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        for pool in pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let version = version(&pool);
            let was_valid = match self.seen.get(&name) {
                Some((seen, _)) if *seen == version => continue,
                Some((_, valid)) => *valid,
                None => false,
            };
            let problems = pool.validate();
            let blocking: Vec<_> = unsupported::nodepool(&pool)
                .into_iter()
                .filter(|f| f.blocks)
                .collect();
            let valid = problems.is_empty() && blocking.is_empty();
            if valid {
                apply.push((*pool).clone());
            } else if problems.is_empty() {
                let fields = unsupported::summary(&blocking);
                warn!(nodepool = %name, %fields, "NodePool uses a field not acted on yet; not provisioning for it.");
                if was_valid {
                    remove.push(name.clone());
                }
            } else {
                let problems = status::problems_text(&problems);
                warn!(nodepool = %name, %problems, "NodePool is invalid; not provisioning for it.");
                cluster.emit_event(
                    &EventObject::NodePool(name.clone()),
                    "InvalidNodePool",
                    &problems,
                );
                if was_valid {
                    remove.push(name.clone());
                }
            }
            self.seen.insert(name, (version, valid));
        }
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|n| !current.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            if self.seen.remove(&name).is_some_and(|(_, valid)| valid) {
                remove.push(name);
            }
        }
        (apply, remove)
    }
}

async fn route(signal: Signal, system: &System, cluster: &KubeCluster) {
    let delivered = match signal {
        Signal::PodUnschedulable(pod) => match cluster.caches().model_pod(&pod) {
            Ok(model) => system.scheduler().pod_pending(model),
            Err(error) => {
                cluster.emit_event(
                    &EventObject::Pod {
                        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                        name: pod.metadata.name.clone().unwrap_or_default(),
                    },
                    "FailedScheduling",
                    &format!("cannot be provisioned for: {error}"),
                );
                Ok(())
            }
        },
        Signal::PodBound { uid, pod, node } => system.scheduler().pod_bound(uid, pod, node),
        Signal::PodDeleted { uid } => system.scheduler().pod_deleted(uid),
        Signal::NodeRegistered { nodeclaim, node } => match system.nodeclaim(&nodeclaim) {
            Some(actor) => actor.node_registered(node),
            None => {
                warn!(
                    node,
                    nodeclaim, "Node registered for a NodeClaim no actor runs."
                );
                Ok(())
            }
        },
        Signal::NodeInitialized { nodeclaim, node } => {
            if let Err(error) = cluster.label_initialized(&node).await {
                warn!(node, %error, "Labelling the Node initialized failed.");
            }
            match system.nodeclaim(&nodeclaim) {
                Some(actor) => actor.node_ready(),
                None => Ok(()),
            }
        }
        Signal::NodeClaimDeleting {
            nodeclaim,
            since_ms,
        } => match system.nodeclaim(&nodeclaim) {
            Some(actor) => actor.deleted(since_ms),
            None => {
                finalize_orphans(system, cluster.caches(), cluster).await;
                Ok(())
            }
        },
        // Handled by the run loop, which owns the NodePool bookkeeping.
        Signal::NodePoolsChanged => Ok(()),
        Signal::NodeGone { nodeclaim, node } => match system.nodeclaim(&nodeclaim) {
            Some(actor) => actor.node_gone(format!("node {node} was deleted")),
            None => Ok(()),
        },
    };
    if let Err(error) = delivered {
        warn!(%error, "Could not deliver a cluster change to its actor.");
    }
}

/// Why [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// `shutdown` resolved.
    Shutdown,
    /// This replica led and lost the Lease: it stopped acting at once. The process should
    /// exit (and be restarted as a candidate with fresh state), as upstream does.
    LeadershipLost,
}

/// Runs the controller until `shutdown` resolves or, when leader election is on, this
/// replica loses the lease it held.
pub async fn run(
    client: kube::Client,
    options: ControllerOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Stopped> {
    let mut shutdown = std::pin::pin!(shutdown);
    let metrics = Arc::new(karpenter_actors::metrics::Metrics::new());
    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let (stop_election, election_stopped) = tokio::sync::watch::channel(false);
    // Without an election this replica leads for good; the sender lives as long as `run`.
    let (_always_leading, always) = tokio::sync::watch::channel(true);
    let (mut leading, election) = match &options.leader_election {
        Some(election) => {
            let api = kube::Api::namespaced(client.clone(), &election.namespace);
            let (elector, leading) =
                Elector::new(api, &election.name, &options.identity, election.timing);
            (leading, Some(tokio::spawn(elector.run(election_stopped))))
        }
        None => (always, None),
    };
    let mut _probes = Vec::new();
    for addr in &options.probes {
        _probes.push(
            super::probes::start(*addr, synced_rx.clone(), leading.clone(), metrics.clone())
                .await?,
        );
    }
    let mut watches = watch::start(&client, options.settings.node_overlay);
    watch::wait_synced(&watches.caches, options.sync_timeout)
        .await
        .map_err(|not_synced| {
            anyhow::anyhow!(
                "{not_synced}; are the CRDs installed (`karpenter crds | kubectl apply -f -`) and may this identity list and watch them?"
            )
        })?;
    let _ = synced_tx.send(true);

    if !follow(&mut leading, &mut watches, &mut shutdown).await? {
        let _ = stop_election.send(true);
        if let Some(election) = election {
            let _ = election.await;
        }
        return Ok(Stopped::Shutdown);
    }
    info!(identity = %options.identity, "Leading: starting the actors.");
    watches.resync();
    let caches = watches.caches.clone();
    let (
        super::journal::Opened {
            journal,
            view: journaled,
            ..
        },
        shipping,
    ) = open_journal(&options, &leading, &metrics).await?;
    let (booted_tx, booted_rx) = mpsc::unbounded_channel::<InstanceBooted>();
    let Cloud {
        cloud,
        provider,
        classes,
        interruption_queue,
    } = connect_cloud(&client, &options.cloud, booted_tx, &metrics).await?;
    let overlays = Arc::new(karpenter_actors::overlays::OverlayStore::default());
    let in_process = matches!(
        options.cloud,
        ControllerCloud::Sim {
            kubelets: SimKubelets::InProcess,
            ..
        }
    );
    let sim_nodes = in_process.then(|| {
        let nodes = SimNodes::new(client.clone(), Instances::Cloud(cloud.clone()))
            .with_overlays(overlays.clone());
        tokio::spawn(nodes.run(booted_rx))
    });
    let mut class_sync = NodeClassSync::default();
    class_sync.sync(classes.as_ref(), &caches);
    let reporter = Reporter {
        controller: "karpenter".into(),
        instance: Some(options.identity.clone()),
    };
    let cluster = Arc::new(KubeCluster::new(client.clone(), caches.clone(), reporter));
    let mut pool_sync = NodePoolSync::default();
    let (nodepools, _) = pool_sync.changes(&caches, &cluster);
    info!(nodepools = nodepools.len(), "Starting the actors.");
    let catalogs = crate::system::recent_catalogs(&journaled, journal.now_ms());
    super::overlays::sync(&overlays, &caches);
    let started = crate::system::start(crate::system::Start {
        journal,
        overlays: overlays.clone(),
        cloud,
        cluster: cluster.clone(),
        metrics,
        settings: options.settings,
        scope: options.scope.clone(),
        nodepools,
        last_round: journaled.last_round,
        catalogs,
        interruption_queue,
        // Started once the cluster's NodeClaims are adopted: until then their instances
        // would look leaked.
        gc: None,
        disruption: None,
        admin: options.admin.clone(),
        shipping,
    })
    .await?;
    let system = started.system.clone();
    adopt_nodeclaims(&system, &caches, &cluster, &journaled).await?;
    system.start_gc(options.gc)?;
    system.start_disruption(crate::system::disruption_start(&journaled))?;

    let lead = Lead {
        client: &client,
        caches: &caches,
        cluster: &cluster,
        system: &system,
        provider: provider.as_deref(),
        classes: classes.as_ref(),
        // `--kubernetes-version` pins it; otherwise it follows the API server.
        follow_version: matches!(&options.cloud, ControllerCloud::Aws(aws) if aws.cluster.kubernetes_version.is_none()),
    };
    let stopped = lead
        .run(
            &mut leading,
            &mut watches,
            class_sync,
            pool_sync,
            &mut shutdown,
        )
        .await?;
    info!(?stopped, "Stopping.");
    if stopped == Stopped::LeadershipLost {
        // The history is another leader's now: this replica ships nothing more.
        started.stop_without_shipping().await?;
    } else {
        started.stop().await?;
    }
    if let Some(sim_nodes) = sim_nodes {
        sim_nodes.abort();
    }
    let _ = stop_election.send(true);
    if let Some(election) = election {
        let _ = election.await;
    }
    Ok(stopped)
}

/// The cloud the controller launches in.
struct Cloud {
    cloud: Arc<dyn CloudProvider>,
    /// The EC2 provider, whose node classes the controller keeps resolved.
    provider: Option<Arc<AwsCloud>>,
    /// Where the cluster's EC2NodeClasses are handed.
    classes: Arc<dyn NodeClasses>,
    interruption_queue: Option<Arc<dyn InterruptionQueue>>,
}

async fn connect_cloud(
    client: &kube::Client,
    choice: &ControllerCloud,
    booted_tx: mpsc::UnboundedSender<InstanceBooted>,
    metrics: &Arc<karpenter_actors::metrics::Metrics>,
) -> anyhow::Result<Cloud> {
    Ok(match choice {
        ControllerCloud::Sim {
            region, boot_delay, ..
        } => {
            refuse_real_nodes(client).await?;
            let types = crate::system::catalog_instance_types(region)?;
            let sim = Arc::new(
                SimCloud::new(types, Vec::new(), *boot_delay, booted_tx)
                    .with_price_table(crate::system::catalog_price_table(region)?),
            );
            Cloud {
                cloud: sim.clone(),
                classes: sim,
                provider: None,
                interruption_queue: None,
            }
        }
        ControllerCloud::Aws(aws) => {
            let mut aws = aws.as_ref().clone();
            if aws.cluster.kubernetes_version.is_none() {
                aws.cluster.kubernetes_version = match server_version(client).await {
                    Ok(version) => Some(version),
                    Err(error) => {
                        tracing::warn!(%error, "Asking EKS for the Kubernetes version.");
                        None
                    }
                };
            }
            let parts = crate::system::aws::open(&aws, metrics).await?;
            Cloud {
                cloud: parts.provider.clone(),
                classes: parts.provider.clone(),
                provider: Some(parts.provider),
                interruption_queue: parts
                    .queue
                    .map(|q| Arc::new(q) as Arc<dyn InterruptionQueue>),
            }
        }
    })
}

/// `--cloud sim` registers simulated Nodes and reports pod status itself: beside real
/// kubelets it would fake-run real workloads. Refused when any Node is an EC2 instance it
/// did not create (a providerID `aws:///…` without the simulated-node annotation).
async fn refuse_real_nodes(client: &kube::Client) -> anyhow::Result<()> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let list = nodes
        .list(&kube::api::ListParams::default())
        .await
        .context("--cloud sim: cannot list the cluster's Nodes to check none is an EC2 instance")?;
    let real = super::simnodes::real_ec2_nodes(&list.items);
    if let Some(first) = real.first() {
        anyhow::bail!(
            "--cloud sim: this cluster has {} EC2 Node(s) the in-memory cloud did not create (first: {first}); \
             the simulated cloud would register fake Nodes and set pod status beside them. \
             Use --cloud aws (the chart's settings.cloud: aws)",
            real.len()
        );
    }
    Ok(())
}

/// The API server's Kubernetes minor version (`/version`), which AMI aliases resolve for.
async fn server_version(client: &kube::Client) -> Result<String, String> {
    let answer = (client.apiserver_version().await)
        .map_err(|e| format!("cannot read the API server's /version: {e}"))?;
    karpenter_aws::cluster::server_minor_version(&answer.major, &answer.minor)
        .map_err(|e| format!("the API server's /version is not a Kubernetes 1.x version: {e}"))
}

/// A follower keeps its caches warm and waits; what the watches report meanwhile is reported
/// again, from the caches, once it leads. True once this replica leads, false on shutdown.
async fn follow(
    leading: &mut tokio::sync::watch::Receiver<bool>,
    watches: &mut watch::Watches,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> anyhow::Result<bool> {
    while !*leading.borrow() {
        tokio::select! {
            () = shutdown.as_mut() => return Ok(false),
            changed = leading.changed() => {
                if changed.is_err() {
                    anyhow::bail!("leader election stopped");
                }
            }
            Some(_) = watches.signals.recv() => {}
        }
    }
    Ok(true)
}

/// The leader's work once the actors run: status and node classes on a tick, NodePool
/// changes and cluster signals as they come, until shutdown or the Lease is lost.
struct Lead<'a> {
    client: &'a kube::Client,
    caches: &'a Caches,
    cluster: &'a KubeCluster,
    system: &'a System,
    provider: Option<&'a AwsCloud>,
    classes: &'a dyn NodeClasses,
    /// Whether the API server's version is polled for the provider's AMI aliases.
    follow_version: bool,
}

impl Lead<'_> {
    async fn run(
        &self,
        leading: &mut tokio::sync::watch::Receiver<bool>,
        watches: &mut watch::Watches,
        mut class_sync: NodeClassSync,
        mut pool_sync: NodePoolSync,
        shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> anyhow::Result<Stopped> {
        let (caches, cluster, system) = (self.caches, self.cluster, self.system);
        let mut status_tick = tokio::time::interval(STATUS_EVERY);
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut version_tick =
            tokio::time::interval_at(tokio::time::Instant::now() + VERSION_EVERY, VERSION_EVERY);
        version_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks = 0u64;
        loop {
            tokio::select! {
                () = shutdown.as_mut() => return Ok(Stopped::Shutdown),
                _ = status_tick.tick() => {
                    class_sync.sync(self.classes, caches);
                    report_status(self.client, cluster, caches, system, self.provider).await;
                    let overlays = &system.context().overlays;
                    super::overlays::sync(overlays, caches);
                    super::overlays::report_status(self.client, caches, overlays, &system.context().now()).await;
                    finalize_orphans(system, caches, cluster).await;
                    // CapacityBuffers are read by rounds; this makes one look at them every
                    // 30 s, as upstream's buffer controller requeues each.
                    ticks += 1;
                    if system.context().settings.capacity_buffer && ticks % 6 == 1 {
                        system.scheduler().buffers_changed()?;
                    }
                }
                _ = version_tick.tick(), if self.follow_version => {
                    if let Some(provider) = self.provider {
                        match server_version(self.client).await {
                            Ok(version) => {
                                provider.set_kubernetes_version(&version);
                            }
                            Err(error) => warn!(%error, version = %provider.kubernetes_version(), "AMI aliases stay on the version last read."),
                        }
                    }
                }
                changed = leading.changed() => {
                    if changed.is_err() || !*leading.borrow() {
                        warn!("Lost the leader Lease: stopping at once.");
                        return Ok(Stopped::LeadershipLost);
                    }
                }
                signal = watches.signals.recv() => match signal {
                    Some(Signal::NodePoolsChanged) => {
                        // A new NodePool usually comes with its EC2NodeClass.
                        class_sync.sync(self.classes, caches);
                        let (apply, remove) = pool_sync.changes(caches, cluster);
                        for pool in apply {
                            info!(nodepool = ?pool.metadata.name, "NodePool applied.");
                            system.apply_nodepool(pool)?;
                        }
                        for name in remove {
                            info!(nodepool = %name, "NodePool removed; no more NodeClaims for it.");
                            system.remove_nodepool(name)?;
                        }
                    }
                    Some(signal) => route(signal, system, cluster).await,
                    None => anyhow::bail!("the watches stopped"),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_client_for_an_https_api_server_builds() {
        // Real API servers speak TLS: the client must have a TLS stack and one crypto
        // provider (rustls with aws-lc-rs, shared with the AWS SDK).
        let url = "https://127.0.0.1:6443".parse().map_err(|e| format!("{e}"));
        let config = kube::Config::new(url.unwrap_or_default());
        assert!(kube::Client::try_from(config).is_ok());
    }
}
