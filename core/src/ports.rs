//! The two ports the actors drive: the cloud ([`CloudProvider`]) and the cluster
//! ([`Cluster`]). AWS and kube-rs implement them in production, the simulator in `simulate`.
//! Each method's doc is its contract; errors the logic branches on are typed.

pub mod history;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{CapacityType, InstanceType, Pod, Requirements, Resources, Taint};
use crate::scheduling::InstanceTypeOption;

/// A boxed, sendable future: the ports are used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An offering that failed, for the insufficient-capacity cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingKey {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
}

impl std::fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// Failures of cloud calls that the logic treats differently.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// No capacity for any of the offerings tried; they should be marked unavailable and the
    /// pods re-planned on other offerings.
    #[error("insufficient capacity for {}", offerings.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    InsufficientCapacity {
        /// The offerings that failed.
        offerings: Vec<OfferingKey>,
    },
    /// The instance does not exist (never did, or is fully gone).
    #[error("instance {id} not found")]
    NotFound {
        /// Instance id.
        id: String,
    },
    /// The node class cannot launch yet (subnets, AMIs, … unresolved).
    #[error("node class {name} is not ready: {reason}")]
    NodeClassNotReady {
        /// Node class name.
        name: String,
        /// What is missing.
        reason: String,
    },
    /// Anything else; retried with backoff.
    #[error("cloud call failed: {0}")]
    Other(String),
}

impl CloudError {
    /// Label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
            CloudError::NotFound { .. } => "not_found",
            CloudError::NodeClassNotReady { .. } => "nodeclass_not_ready",
            CloudError::Other(_) => "other",
        }
    }
}

/// What a NodeClaim asks the cloud for.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRequest {
    /// NodeClaim name (also tagged on the instance).
    pub nodeclaim: String,
    /// NodePool name (tagged on the instance).
    pub nodepool: String,
    /// Idempotency token: the same token never launches a second instance.
    pub client_token: String,
    /// The node class (EC2NodeClass) to launch with.
    pub node_class: String,
    /// The NodeClaim's requirements (zones, capacity types, …).
    pub requirements: Requirements,
    /// Labels the node registers with (the NodePool template's).
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with (the NodePool template's, plus startup taints).
    pub taints: Vec<Taint>,
    /// Instance types to try, cheapest first.
    pub instance_types: Vec<InstanceTypeOption>,
    /// NodeOverlays set some of those prices: the cloud launches in this order (CreateFleet's
    /// prioritized strategies, as upstream) rather than by its own prices.
    pub overlaid: bool,
}

/// Lifecycle of an instance as the cloud reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceState {
    /// Starting or running.
    Running,
    /// Terminating.
    ShuttingDown,
    /// Gone (still listed for a while).
    Terminated,
}

/// An instance the cloud launched for a NodeClaim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// Cloud id, e.g. `i-0abc…`.
    pub id: String,
    /// Kubernetes provider id, e.g. `aws:///us-east-1a/i-0abc…`.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// USD/hour paid.
    pub price: f64,
    /// Image booted.
    pub image_id: String,
    /// The NodeClaim it was launched for (from its tags).
    pub nodeclaim: String,
    /// The NodePool (from its tags).
    pub nodepool: String,
    /// State.
    pub state: InstanceState,
    /// Launch time, ms since the Unix epoch, when the cloud reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at_ms: Option<i64>,
    /// Where `price` came from (the Pricing API, the embedded table, spot price history, a
    /// NodeOverlay), when the cloud or an overlay says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_source: Option<String>,
    /// The capacity reservation it runs in, when it launched into one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<crate::model::Reservation>,
}

impl Instance {
    /// The labels the instance gives its Node, wherever a Node or its stand-in is made from
    /// it: its type's labels (when the type is known), then the type, zone, capacity type and
    /// NodePool it launched with. The hostname is the Node's own.
    pub fn node_labels(&self, instance_type: Option<&InstanceType>) -> BTreeMap<String, String> {
        use crate::vocab::labels;
        let mut out = instance_type.map(|t| t.labels.clone()).unwrap_or_default();
        out.insert(labels::INSTANCE_TYPE.into(), self.instance_type.clone());
        out.insert(labels::ZONE.into(), self.zone.clone());
        out.insert(
            labels::CAPACITY_TYPE.into(),
            self.capacity_type.as_str().into(),
        );
        if !self.nodepool.is_empty() {
            out.insert(labels::NODEPOOL.into(), self.nodepool.clone());
        }
        if let Some(reservation) = &self.reservation {
            out.insert(
                labels::CAPACITY_RESERVATION_ID.into(),
                reservation.id.clone(),
            );
            out.insert(
                labels::CAPACITY_RESERVATION_TYPE.into(),
                reservation.kind.as_str().into(),
            );
        }
        out
    }
}

/// The cloud, as the actors use it.
pub trait CloudProvider: Send + Sync + 'static {
    /// The provider's name, as metrics label it (`aws`).
    fn provider_name(&self) -> &'static str;

    /// Launches one instance for `request`, trying its instance types cheapest first and
    /// preferring reserved, then spot, then on-demand where allowed. Idempotent: a retry or a
    /// replay with the same `client_token` returns the instance the first call launched.
    /// `InsufficientCapacity` names every offering that failed.
    fn create<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Instance, CloudError>>;

    /// Terminates an instance. Succeeds when it is already terminating or gone (not found
    /// means already gone).
    fn delete<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<(), CloudError>>;

    /// One instance. `NotFound` when it does not exist.
    fn get<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Instance, CloudError>>;

    /// Every instance tagged as launched by this cluster's autoscaler, in any state.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>>;

    /// Now, on the clock the cloud's launch times are on (ms since the Unix epoch): the
    /// garbage collector measures an instance's age with it.
    fn now_ms(&self) -> i64;

    /// Instance types (with offerings: zone × capacity type × price × availability) for a
    /// node class.
    fn instance_types<'a>(
        &'a self,
        node_class: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>>;

    /// Marks an offering unavailable for a while (spot interruptions, failed launches).
    fn mark_unavailable(&self, offering: &OfferingKey);

    /// The static hash of a node class as it is now (stamped on new NodeClaims, compared by
    /// [`CloudProvider::drift`]), with its version; `None` when the node class is unknown.
    fn node_class_hash(&self, node_class: &str) -> Option<NodeClassHash>;

    /// Whether a launched NodeClaim no longer matches its node class, and why, as upstream's
    /// provider judges it: `NodeClassDrift` (static hash), `AMIDrift`, `SubnetDrift`,
    /// `SecurityGroupDrift`. `Ok(None)` while it matches (or while the node class cannot be
    /// resolved: nothing is drifted on a guess).
    fn drift<'a>(
        &'a self,
        check: &'a DriftCheck,
    ) -> BoxFuture<'a, Result<Option<Drift>, CloudError>>;

    /// The running instances of this cluster whose Capacity Block is expiring (to be
    /// drained and replaced before the cloud takes them back), as upstream's capacity
    /// reservation expiration controller finds them every minute; `Ok(None)` from a
    /// provider that does not look for them (the simulator notices blocks ending on its own
    /// clock).
    fn expiring_block_instances(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, CloudError>> {
        Box::pin(async { Ok(None) })
    }
}

/// A node class's static hash, with the version of the hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassHash {
    /// The hash.
    pub hash: String,
    /// Its version: hashes of another version are not compared.
    pub version: String,
}

impl NodeClassHash {
    /// The hash stamped on `claim`, if any.
    pub fn stamped_on(claim: &crate::api::NodeClaim) -> Option<NodeClassHash> {
        use crate::vocab::labels;
        let annotations = claim.metadata.annotations.as_ref()?;
        Some(NodeClassHash {
            hash: annotations.get(labels::EC2NODECLASS_HASH)?.clone(),
            version: annotations.get(labels::EC2NODECLASS_HASH_VERSION)?.clone(),
        })
    }

    /// Stamps this hash on `claim`.
    pub fn stamp(&self, claim: &mut crate::api::NodeClaim) {
        use crate::vocab::labels;
        let annotations = claim
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(labels::EC2NODECLASS_HASH.into(), self.hash.clone());
        annotations.insert(
            labels::EC2NODECLASS_HASH_VERSION.into(),
            self.version.clone(),
        );
    }

    /// What EC2NodeClass `spec` hashes to now, in this version of the hashing.
    pub fn of(spec: &crate::api::ec2nodeclass::EC2NodeClassSpec) -> NodeClassHash {
        NodeClassHash {
            hash: crate::api::ec2nodeclass::ec2nodeclass_hash(spec),
            version: crate::api::ec2nodeclass::EC2NODECLASS_HASH_VERSION.into(),
        }
    }

    /// `NodeClassDrift` for a NodeClaim stamped with `stamped` when EC2NodeClass `class`
    /// hashes to `self` now; a hash of another version is not compared.
    pub fn drift_from(&self, stamped: Option<&NodeClassHash>, class: &str) -> Option<Drift> {
        let stamped = stamped?;
        (stamped.version == self.version && stamped.hash != self.hash).then(|| Drift {
            reason: "NodeClassDrift".into(),
            message: format!("EC2NodeClass {class} changed since this NodeClaim was created"),
        })
    }
}

/// What the cloud is asked about a NodeClaim's drift.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftCheck {
    /// NodeClaim.
    pub nodeclaim: String,
    /// Its node class.
    pub node_class: String,
    /// Its instance.
    pub instance: Instance,
    /// The node class hash it was created with, if stamped.
    pub node_class_hash: Option<NodeClassHash>,
}

/// Why a NodeClaim no longer matches its node class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Upstream's reason (`AMIDrift`, …).
    pub reason: String,
    /// What differs.
    pub message: String,
}

/// A node as the cluster reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Provider id, linking it to an instance.
    pub provider_id: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Resources,
    /// Requests of pods bound to it.
    pub requested: Resources,
    /// The part of `requested` that DaemonSet pods ask for.
    pub daemon_requested: Resources,
    /// Namespace and labels of the pods bound to it.
    pub pods: Vec<crate::scheduling::PodLabels>,
    /// Required pod anti-affinity terms of the pods bound to it, with each pod's namespace:
    /// pods they select may not join.
    pub anti_affinity: Vec<crate::scheduling::AntiAffinityOf>,
    /// Host ports the pods bound to it bind.
    pub host_ports: Vec<crate::model::pod::HostPort>,
    /// Per CSI driver, how many volumes it can have attached (its CSINode).
    pub attach_limits: BTreeMap<String, i64>,
    /// Volumes the pods bound to it have attached.
    pub attached: Vec<crate::model::volumes::VolumeAttachment>,
    /// Ready condition.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
}

/// What the cluster reports as it changes.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterEvent {
    /// kube-scheduler could not place this pod (PodScheduled=False, Unschedulable).
    PodUnschedulable(Box<Pod>),
    /// A pod was bound to a node.
    PodBound {
        /// Pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// Node name.
        node: String,
    },
    /// A pod was deleted.
    PodDeleted {
        /// Pod UID.
        uid: String,
    },
    /// A node registered (joined the cluster).
    NodeRegistered(Box<NodeInfo>),
    /// A node became Ready and its startup taints are gone.
    NodeReady {
        /// Node name.
        name: String,
        /// Provider id.
        provider_id: String,
    },
    /// A node was deleted.
    NodeDeleted {
        /// Node name.
        name: String,
    },
}

/// Why an eviction did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvictError {
    /// A PodDisruptionBudget does not allow it now; retry later.
    #[error("eviction of {pod} blocked by PodDisruptionBudget {pdb}")]
    BlockedByPdb {
        /// Pod `namespace/name`.
        pod: String,
        /// PDB `namespace/name`.
        pdb: String,
    },
    /// Anything else; retried.
    #[error("eviction failed: {0}")]
    Other(String),
}

/// A pod a drain still has to deal with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodToDrain {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Not to be evicted (yet): the drain waits for it to finish or leave.
    pub wait: bool,
}

/// What a Kubernetes Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventObject {
    /// A pod.
    Pod {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A Node.
    Node(String),
    /// A NodeClaim.
    NodeClaim(String),
    /// A NodePool.
    NodePool(String),
    /// An EC2NodeClass.
    EC2NodeClass(String),
}

impl EventObject {
    /// The object's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            EventObject::Pod { .. } => "Pod",
            EventObject::Node(_) => "Node",
            EventObject::NodeClaim(_) => "NodeClaim",
            EventObject::NodePool(_) => "NodePool",
            EventObject::EC2NodeClass(_) => "EC2NodeClass",
        }
    }
}

impl std::fmt::Display for EventObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventObject::Pod { namespace, name } => write!(f, "Pod/{namespace}/{name}"),
            EventObject::Node(name)
            | EventObject::NodeClaim(name)
            | EventObject::NodePool(name)
            | EventObject::EC2NodeClass(name) => {
                write!(f, "{}/{name}", self.kind())
            }
        }
    }
}

/// A cluster write that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// Somebody else changed or owns what was written; re-read and retry.
    #[error("conflict writing {object}: {message}")]
    Conflict {
        /// `Kind/name`.
        object: String,
        /// The API server's message.
        message: String,
    },
    /// What the object depends on is gone (a NodeClaim's NodePool was deleted): writing it
    /// would create an orphan, so it is not written, now or later.
    #[error("not writing {object}: {message}")]
    Gone {
        /// `Kind/name`.
        object: String,
        /// What is gone.
        message: String,
    },
    /// Anything else (unreachable API server, refused request); retried.
    #[error("writing {object} failed: {message}")]
    Other {
        /// `Kind/name`.
        object: String,
        /// What went wrong.
        message: String,
    },
}

/// A pod bound to a node, as disruption needs to know it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoundPod {
    /// The node it is bound to.
    pub node: String,
    /// The pod, as a scheduling round would place it (a pod that cannot be read is
    /// `blocked`, so no simulation moves it).
    pub pod: Pod,
    /// Whether it has to be placed elsewhere when its node goes: not a DaemonSet's, not a
    /// static pod's mirror, not finished, not tolerating the disrupted taint.
    pub reschedulable: bool,
    /// Its `karpenter.sh/do-not-disrupt` annotation, if any.
    pub do_not_disrupt: Option<String>,
    /// When it was created (ms since the Unix epoch), if known: a duration in
    /// `do-not-disrupt` counts from then.
    pub created_ms: Option<i64>,
    /// The PodDisruptionBudgets selecting it, `namespace/name`.
    pub pdbs: Vec<String>,
}

/// What disruption reads of the cluster besides [`Cluster::nodes`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DisruptionView {
    /// Every pod bound to a node.
    pub pods: Vec<BoundPod>,
    /// Every PodDisruptionBudget (`namespace/name`) with the evictions it allows now
    /// (`status.disruptionsAllowed`).
    pub pdbs: BTreeMap<String, i32>,
    /// Nodes and NodeClaims annotated `karpenter.sh/do-not-disrupt: "true"`, by name.
    pub protected: std::collections::BTreeSet<String>,
    /// Nodes whose Ready condition is not True, by name.
    pub not_ready: std::collections::BTreeSet<String>,
    /// Per node, its conditions some repair policy matches
    /// ([`crate::disruption::repair::watched`]), with since when they hold.
    pub conditions: BTreeMap<String, Vec<NodeCondition>>,
}

/// A node condition, and since when it has held.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeCondition {
    /// Type (`Ready`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// Status (`True`, `False`, `Unknown`).
    pub status: String,
    /// Its `lastTransitionTime` (ms since the Unix epoch).
    pub since_ms: i64,
}

/// The cluster, as the actors use it.
pub trait Cluster: Send + Sync + 'static {
    /// Nodes with what is requested of them (Ready or not).
    fn nodes(&self) -> BoxFuture<'_, Vec<NodeInfo>>;
    /// The pods draining `node` still has to deal with now: those of the current drain tier
    /// to evict, and those to wait for (`karpenter.sh/do-not-disrupt`). Pods of later tiers
    /// are listed once the earlier tiers are gone; pods a drain leaves alone (finished,
    /// mirror, tolerating `karpenter.sh/disrupted`) are never listed. Empty means drained.
    fn pods_to_drain<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Vec<PodToDrain>>;
    /// DaemonSet pod templates, for overhead on new nodes.
    fn daemonsets(&self) -> BoxFuture<'_, Vec<Pod>>;
    /// Every namespace with its labels, for pod affinity namespace selectors.
    fn namespace_labels(&self) -> BoxFuture<'_, BTreeMap<String, BTreeMap<String, String>>>;
    /// Registration: lays the NodeClaim's labels, annotations and taints over its Node (as
    /// [`crate::api::registration::register`] decides), removes the
    /// `karpenter.sh/unregistered` taint and marks it `karpenter.sh/registered`. Not found
    /// means the node is gone (success: nothing left to sync); an error means the node may
    /// still carry the unregistered taint, so the caller retries.
    fn sync_node<'a>(
        &'a self,
        node: &'a str,
        claim: &'a crate::api::NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Writes a NodeClaim object as its actor sees it (metadata, spec, status and conditions),
    /// creating it the first time; in Kubernetes one server-side apply per call under one
    /// field manager. `Gone` when creating it for a NodePool that no longer exists; other
    /// errors are retried by the caller.
    fn put_nodeclaim<'a>(
        &'a self,
        claim: &'a crate::api::NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Lets a NodeClaim object go once its instance is gone: removes the termination
    /// finalizer (and deletes the object if nobody has). Not found means already gone.
    fn release_nodeclaim<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Marks a node unschedulable and taints it `karpenter.sh/disrupted:NoSchedule`.
    /// Not found means already gone (success); an error means the node may still take pods,
    /// so the caller retries before evicting anything.
    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Taints a node `karpenter.sh/disrupted:NoSchedule` (`disrupted`), so nothing new lands
    /// on it while a disruption command replaces it, or takes that taint off again (the node
    /// stays schedulable either way). Not found means already gone (success).
    fn taint_disrupted<'a>(
        &'a self,
        node: &'a str,
        disrupted: bool,
    ) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Evicts a pod through the Eviction API, honouring PodDisruptionBudgets.
    /// Not found means already gone (success).
    fn evict<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), EvictError>>;
    /// How many volumes are still attached to `node` (its VolumeAttachments): a drained
    /// node's instance is terminated only once they are detached, so no volume is cut off
    /// mid-write.
    fn volumes_attached<'a>(&'a self, node: &'a str) -> BoxFuture<'a, usize>;
    /// Deletes a Node object and lifts its termination finalizer. Not found means already
    /// gone (success); an error means the Node may remain, so the caller retries before it
    /// lets the NodeClaim go.
    fn delete_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>>;
    /// Records a Kubernetes Event with an upstream reason (`Nominated`, `FailedScheduling`, …).
    fn emit_event(&self, object: &EventObject, reason: &str, message: &str);
    /// The pods bound to nodes, the PodDisruptionBudgets and the `do-not-disrupt` Nodes and
    /// NodeClaims, as a disruption pass reads them.
    fn disruption_view(&self) -> BoxFuture<'_, DisruptionView>;
    /// The CapacityBuffers, each with what its template reference was found to be (none
    /// from a cluster that serves none).
    fn capacity_buffers(&self) -> BoxFuture<'_, Vec<crate::scheduling::buffers::BufferSource>> {
        Box::pin(async { Vec::new() })
    }
    /// Writes a buffer's status: what it resolved to and, when a round saw its virtual pods,
    /// its `Provisioning` condition.
    fn buffer_status(&self, _status: &BufferStatus) {}
}

/// A CapacityBuffer's status, as rounds decide it.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferStatus {
    /// What it resolved to.
    pub resolved: crate::scheduling::buffers::Resolved,
    /// Its `Provisioning` condition, when the round said one.
    pub provisioning: Option<crate::scheduling::buffers::ConditionState>,
}

/// Why a NodeClaim is being taken down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptionKind {
    /// EC2 Spot Instance Interruption Warning.
    SpotInterrupted,
    /// AWS Health scheduled change.
    ScheduledChange,
    /// The instance is stopping or stopped.
    InstanceStopped,
    /// The instance is shutting down or terminated.
    InstanceTerminated,
    /// EC2 Instance Rebalance Recommendation: recorded and reported, no action (as upstream).
    RebalanceRecommendation,
    /// The Capacity Block the instance runs in is expiring: it ends in 40 minutes and EC2
    /// takes its instances back 10 minutes later (upstream's capacity reservation expiration
    /// controller deletes such NodeClaims then). No EventBridge message says it per instance.
    CapacityBlockExpiring,
}

impl InterruptionKind {
    /// The label used in metrics and disruption reasons (`spot_interrupted`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptionKind::SpotInterrupted => "spot_interrupted",
            InterruptionKind::ScheduledChange => "scheduled_change",
            InterruptionKind::InstanceStopped => "instance_stopped",
            InterruptionKind::InstanceTerminated => "instance_terminated",
            InterruptionKind::RebalanceRecommendation => "rebalance_recommendation",
            InterruptionKind::CapacityBlockExpiring => "capacity_block_expiring",
        }
    }

    /// The Kubernetes Event reason upstream's AWS provider records on the node.
    pub fn event_reason(self) -> &'static str {
        match self {
            InterruptionKind::SpotInterrupted => "SpotInterrupted",
            InterruptionKind::ScheduledChange => "InstanceUnhealthy",
            InterruptionKind::InstanceStopped => "InstanceStopping",
            InterruptionKind::InstanceTerminated => "InstanceTerminating",
            InterruptionKind::RebalanceRecommendation => "SpotRebalanceRecommendation",
            InterruptionKind::CapacityBlockExpiring => "CapacityReservationExpiring",
        }
    }

    /// Whether the NodeClaim is cordoned, drained and replaced.
    pub fn disrupts(self) -> bool {
        self != InterruptionKind::RebalanceRecommendation
    }
}

/// What an interruption queue message holds, already parsed by the adapter.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueMessageContent {
    /// A notice about instances.
    Notice {
        /// Kind.
        kind: InterruptionKind,
        /// Instances it names.
        instance_ids: Vec<String>,
    },
    /// Well-formed, asks for nothing.
    Ignored {
        /// Why.
        reason: String,
    },
    /// Unparsable or of an unsupported kind.
    Malformed {
        /// What is wrong with it.
        error: String,
    },
}

/// One message received from an interruption queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueMessage {
    /// The queue's id for it.
    pub id: String,
    /// Handle to delete it with.
    pub receipt: String,
    /// When the event it reports happened, ms since the Unix epoch, when known.
    pub sent_at_ms: Option<u64>,
    /// Content.
    pub content: QueueMessageContent,
}

/// An interruption event stream (an SQS queue on AWS). Messages are deleted only after they
/// have been recorded and acted on, so a crash in between redelivers them.
pub trait InterruptionQueue: Send + Sync + 'static {
    /// The queue's name, for the journal and logs.
    fn name(&self) -> &str;
    /// Waits (long poll) for up to a batch of messages; an empty batch is normal.
    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, CloudError>>;
    /// Deletes a handled message.
    fn delete<'a>(&'a self, receipt: &'a str) -> BoxFuture<'a, Result<(), CloudError>>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::vocab::labels;

    #[test]
    fn an_instance_labels_its_node_with_its_type_zone_capacity_type_and_pool() {
        let instance = Instance {
            id: "i-1".into(),
            provider_id: "aws:///us-east-1a/i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price: 0.03,
            image_id: "ami-1".into(),
            nodeclaim: "default-abcde".into(),
            nodepool: "default".into(),
            state: InstanceState::Running,
            launched_at_ms: None,
            price_source: None,
            reservation: None,
        };
        let bare = instance.node_labels(None);
        assert_eq!(bare[labels::INSTANCE_TYPE], "m5.large");
        assert_eq!(bare[labels::ZONE], "us-east-1a");
        assert_eq!(bare[labels::CAPACITY_TYPE], "spot");
        assert_eq!(bare[labels::NODEPOOL], "default");
        let capacity = Resources::cpu_memory(2000, 8 << 30);
        let it = InstanceType::new(
            "m5.large",
            [(labels::ARCH.to_owned(), "amd64".to_owned())].into(),
            capacity,
            crate::model::instance_type::overhead(&capacity, &Default::default()),
            Vec::new(),
        );
        let full = instance.node_labels(Some(&it));
        assert_eq!(full[labels::ARCH], "amd64");
        assert_eq!(full.len(), bare.len() + 1);
    }
}
