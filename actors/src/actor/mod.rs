//! The ractor actors. Actors own state and timing; the pure logic they call lives in
//! `karpenter_core`, and all I/O goes through the ports.
//! - [`supervisor`]: starts the others as linked children and reports any that fails.
//! - [`scheduler`]: batches pending pods into binpacking rounds and hands the plans out.
//! - [`nodepool`]: one per NodePool, its limits and its NodeClaim actors.
//! - [`nodeclaim`]: one per NodeClaim, carrying out its pure lifecycle.
//! - [`interruption`]: one per event stream, routing notices to NodeClaims.
//! - [`gc`]: the garbage collector of instances and NodeClaims nobody owns.
//! - [`disruption`]: the disruption controller (empty, drifted, expired, underused nodes).
//! - [`keeper`]: keeps the journal bounded (snapshots, retention).
//! - [`shipper`]: ships the journal to the history store.
//! - [`messages`]: every message the actors exchange and every status they report.
//!
//! Runtime guarantees:
//! - every state transition is journaled before the actor acts on it; the launch intent
//!   (`LaunchRequested`, with its idempotency token) is flushed before the cloud is called;
//! - messages to one actor are handled one at a time, in order;
//! - time is tokio's, so the simulator's virtual clock drives every window and timeout.

pub mod disruption;
pub mod gc;
pub mod interruption;
pub mod keeper;
pub mod messages;
pub mod nodeclaim;
pub mod nodepool;
pub mod scheduler;
pub mod shipper;
pub mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use karpenter_journal::Journal;

use karpenter_core::events::DomainEvent;
use karpenter_core::ports::{CloudProvider, Cluster};

/// How long a question from one actor to another may take (ms) before it counts as
/// unanswered; the handles give the adapters' questions as long ([`crate::handles::CALL_TIMEOUT`]).
pub(crate) const ASK_MS: u64 = 10_000;

/// Timing and scheduling settings, with upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// A batch closes after this long without new pending pods (`BATCH_IDLE_DURATION`, 1 s).
    pub batch_idle: Duration,
    /// A batch closes this long after it opened, however busy (`BATCH_MAX_DURATION`, 10 s).
    pub batch_max: Duration,
    /// Pods still pending after a round are planned again this often, for as long as they
    /// stay pending (upstream requeues every provisionable pod every 10 s).
    pub pending_retry: Duration,
    /// A pod nominated to a NodeClaim whose Node is Ready, schedulable and tolerated, but that
    /// kube-scheduler has not bound there within this long, is planned again (upstream's
    /// nominations live about two batch windows: 20 s).
    pub nomination_window: Duration,
    /// A launch that has not succeeded by then is abandoned (5 min).
    pub launch_timeout: Duration,
    /// A launched instance whose node has not registered by then is terminated (15 min).
    pub registration_timeout: Duration,
    /// How long to wait before retrying an eviction a PDB refused.
    pub eviction_retry: Duration,
    /// How often a launched NodeClaim asks the cloud whether it drifted (5 min).
    pub drift_check: Duration,
    /// How often the disruption controller looks for nodes to disrupt while it has nothing
    /// to do (10 s); after acting it looks again at once.
    pub disruption_poll: Duration,
    /// Whether voluntary disruption commands are carried out (`--disable-disruption` turns
    /// them off); off, NodeClaims still expire, are interrupted and can be deleted by hand,
    /// and their conditions are still kept.
    pub disruption_enabled: bool,
    /// Whether pods' scheduling preferences are honoured (`--preference-policy`, Respect).
    pub preference_policy: karpenter_core::scheduling::PreferencePolicy,
    /// Whether a NodeClaim may launch without its minValues when nothing else places a pod
    /// (`--min-values-policy`, Strict).
    pub min_values_policy: karpenter_core::scheduling::MinValuesPolicy,
    /// Mixed into NodeClaim names, so a controller that starts without its journal (another
    /// replica, a lost volume) does not name claims like objects that already exist. The
    /// simulator uses 0, so its runs repeat exactly.
    pub nodeclaim_name_seed: u64,
    /// The `SpotToSpotConsolidation` feature gate (`--feature-gates`, off): consolidation may
    /// replace spot nodes with cheaper spot nodes.
    pub spot_to_spot: bool,
    /// The `NodeOverlay` feature gate (off, as upstream): NodePools' instance types are
    /// repriced by the NodeOverlays in force ([`Context::overlays`]).
    pub node_overlay: bool,
    /// The `ReservedCapacity` feature gate (on, as upstream): capacity reservations are
    /// offered as `reserved` offerings and launched into.
    pub reserved_capacity: bool,
    /// The `StaticCapacity` feature gate (off, as upstream): static NodePools keep their
    /// replicas; off, they provision nothing (their nodes still left to no other method).
    pub static_capacity: bool,
    /// The `CapacityBuffer` feature gate (off, as upstream): CapacityBuffers' virtual pods
    /// take part in rounds ([`karpenter_core::scheduling::buffers`]).
    pub capacity_buffer: bool,
    /// The `NodeRepair` feature gate (off, as upstream): nodes unhealthy past the cloud's
    /// repair policies are deleted forcefully ([`karpenter_core::disruption::repair`]).
    pub node_repair: bool,
    /// Every repair policy's toleration in place of the cloud's (tests: a node need not be
    /// unhealthy for 30 minutes); `None` keeps the cloud's.
    pub repair_toleration: Option<Duration>,
    /// How long a consolidation command waits before it is checked again and started
    /// (upstream's 15 s).
    pub consolidation_validation: Duration,
    /// How the journal is snapshotted and trimmed ([`keeper`]).
    pub keeping: keeper::JournalKeeping,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            pending_retry: Duration::from_secs(10),
            nomination_window: Duration::from_secs(20),
            launch_timeout: Duration::from_secs(300),
            registration_timeout: Duration::from_secs(900),
            eviction_retry: Duration::from_secs(5),
            drift_check: Duration::from_secs(300),
            disruption_poll: Duration::from_secs(10),
            disruption_enabled: true,
            preference_policy: karpenter_core::scheduling::PreferencePolicy::Respect,
            min_values_policy: karpenter_core::scheduling::MinValuesPolicy::Strict,
            nodeclaim_name_seed: 0,
            spot_to_spot: false,
            node_overlay: false,
            node_repair: false,
            repair_toleration: None,
            static_capacity: false,
            capacity_buffer: false,
            reserved_capacity: true,
            consolidation_validation: karpenter_core::disruption::validation::VALIDATION_DELAY,
            keeping: keeper::JournalKeeping::default(),
        }
    }
}

/// What every actor shares: the journal, the ports and the settings.
#[derive(Clone)]
pub struct Context {
    /// The flight recorder.
    pub journal: Arc<Journal<DomainEvent>>,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// The cluster.
    pub cluster: Arc<dyn Cluster>,
    /// Timing.
    pub settings: Settings,
    /// Prometheus metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Prefix of every actor name in ractor's process-wide registry, so that several
    /// systems (simulations, tests) can run in one process.
    pub scope: String,
    /// The NodeOverlays in force (none unless the `NodeOverlay` gate is on and some exist).
    pub overlays: Arc<crate::overlays::OverlayStore>,
    /// What scheduling rounds and disruption passes over the same NodePools and catalogs
    /// work out once and share.
    pub pools: Arc<karpenter_core::scheduling::PoolCache>,
    /// Where the journal is shipped (`--journal-bucket`), if anywhere.
    pub shipping: Option<Arc<shipper::Shipping>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The cloud as `controller` calls it: each call is timed into
    /// `karpenter_cloudprovider_duration_seconds`.
    pub fn cloud_as(&self, controller: &'static str) -> crate::metrics::MeasuredCloud<'_> {
        crate::metrics::MeasuredCloud::new(self.cloud.as_ref(), &self.metrics, controller)
    }

    /// Appends events, turning a journal failure into an actor error (the supervisor sees it).
    pub fn record(&self, events: &[DomainEvent]) -> Result<(), ractor::ActorProcessingErr> {
        self.journal.append_batch(events)?;
        Ok(())
    }

    /// Now, on the journal's clock (virtual in the simulator), as a Kubernetes timestamp.
    pub fn now(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        let now = jiff::Timestamp::from_millisecond(self.journal.now_ms())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)
    }

    /// Appends events and waits until they are on disk (write-ahead records).
    pub fn record_durably(&self, events: &[DomainEvent]) -> Result<(), ractor::ActorProcessingErr> {
        self.journal.append_batch(events)?;
        self.journal.flush()?;
        Ok(())
    }
}

/// The directory: how actors of one system find each other by name in ractor's registry.
/// The only place that looks names up; everything outside this crate goes through
/// [`crate::handles`].
impl Context {
    /// Every live NodeClaim actor of this system, by NodeClaim name, sorted.
    pub fn nodeclaim_actors(&self) -> Vec<(String, ractor::ActorRef<messages::NodeClaimMsg>)> {
        self.registered(&self.nodeclaim_actor_name(""))
    }

    /// Every live NodePool actor of this system, by NodePool name, sorted.
    pub fn nodepool_actors(&self) -> Vec<(String, ractor::ActorRef<messages::NodePoolMsg>)> {
        self.registered(&self.nodepool_actor_name(""))
    }

    /// The NodeClaim actor of `nodeclaim`, if it runs.
    pub fn nodeclaim_actor(
        &self,
        nodeclaim: &str,
    ) -> Option<ractor::ActorRef<messages::NodeClaimMsg>> {
        ractor::registry::where_is(self.nodeclaim_actor_name(nodeclaim)).map(Into::into)
    }

    /// The NodePool actor of `nodepool`, if it runs.
    pub fn nodepool_actor(
        &self,
        nodepool: &str,
    ) -> Option<ractor::ActorRef<messages::NodePoolMsg>> {
        ractor::registry::where_is(self.nodepool_actor_name(nodepool)).map(Into::into)
    }

    /// The journal keeper, if it runs.
    pub fn keeper(&self) -> Option<ractor::ActorRef<messages::KeeperMsg>> {
        ractor::registry::where_is(self.actor_name("keeper")).map(Into::into)
    }

    /// Every actor of this system by its name below the scope (`scheduler`,
    /// `nodeclaim/<name>`, …), sorted.
    pub fn actor_names(&self) -> Vec<String> {
        let prefix = format!("{}/", self.scope);
        let mut names: Vec<String> = ractor::registry::registered()
            .into_iter()
            .filter_map(|n| n.strip_prefix(&prefix).map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    fn registered<M: ractor::Message>(&self, prefix: &str) -> Vec<(String, ractor::ActorRef<M>)> {
        let mut out: Vec<_> = ractor::registry::registered()
            .into_iter()
            .filter_map(|n| {
                let name = n.strip_prefix(prefix)?.to_owned();
                let cell = ractor::registry::where_is(n)?;
                Some((name, ractor::ActorRef::from(cell)))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The registry name of a NodeClaim actor, so events about its instance or node reach it.
    pub fn nodeclaim_actor_name(&self, nodeclaim: &str) -> String {
        format!("{}/nodeclaim/{nodeclaim}", self.scope)
    }

    /// The registry name of a NodePool actor.
    pub fn nodepool_actor_name(&self, nodepool: &str) -> String {
        format!("{}/nodepool/{nodepool}", self.scope)
    }

    /// The registry name of a singleton actor (`scheduler`, `interruption`, `supervisor`).
    pub fn actor_name(&self, role: &str) -> String {
        format!("{}/{role}", self.scope)
    }
}
