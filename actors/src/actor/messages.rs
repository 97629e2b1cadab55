//! Every message the actors exchange and every status they report, in one place: each actor
//! depends on this module and on the core, never on another actor's module (a parent spawning
//! its children aside).

use std::collections::BTreeMap;
use std::time::Duration;

use ractor::{ActorRef, RpcReplyPort};

use karpenter_core::api::NodePool;
use karpenter_core::disruption::PoolPolicy;
use karpenter_core::disruption::observe::ClaimFacts;
use karpenter_core::disruption::orchestration::Command;
use karpenter_core::events::{NodeClaimPlan, NodeClaimState, RoundRecord};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::lifecycle::status::NodePoolNotReady;
use karpenter_core::model::{Pod, Requirements};
use karpenter_core::ports::{Instance, InterruptionKind, QueueMessage};
use karpenter_core::scheduling::{NodePoolTemplate, SchedulingInput};

/// Messages to a NodeClaim actor: what happened to it (from the cluster, the cloud, its
/// NodePool, the interruption and garbage-collection actors, its own timers and calls), and
/// the question of its state.
#[derive(Debug)]
pub enum NodeClaimMsg {
    /// An input of its lifecycle ([`Input`]).
    Input(Input),
    /// A call it made finished, with the input its result makes.
    Called(Option<Input>),
    /// Current state, for the admin endpoint.
    GetStatus(RpcReplyPort<NodeClaimStatus>),
}

/// A NodeClaim actor's state as the admin endpoint shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeClaimStatus {
    /// Name.
    pub name: String,
    /// NodePool.
    pub nodepool: String,
    /// Lifecycle state.
    pub state: NodeClaimState,
    /// Instance, once launched.
    pub instance: Option<Instance>,
    /// Node, once registered.
    pub node: Option<String>,
    /// Pods planned onto it.
    pub pods: Vec<String>,
    /// Why it is being drained or terminated, once it is.
    pub reason: Option<String>,
    /// What disruption reads of it (times, drift, lifetime, marks).
    pub facts: ClaimFacts,
    /// The scheduling round that planned it (0 for a disruption command's replacement).
    pub round: u64,
    /// Its status conditions as the NodeClaim object carries them.
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// Messages to a NodePool actor.
#[derive(Debug)]
pub enum NodePoolMsg {
    /// The pool as the next scheduling round should see it, unless it is not Ready.
    GetTemplate(RpcReplyPort<Result<PoolTemplate, NodePoolNotReady>>),
    /// Create a NodeClaim a round planned (refused if the pool's limits no longer allow it).
    CreateNodeClaim(Box<NodeClaimPlan>, Box<Requirements>),
    /// Create a disruption command's replacement; the reply comes once its actor runs, or
    /// says why the pool refused it.
    CreateReplacement(
        Box<NodeClaimPlan>,
        Box<Requirements>,
        RpcReplyPort<Result<(), karpenter_core::lifecycle::nodepool::LimitReached>>,
    ),
    /// The pool's disruption settings.
    GetPolicy(RpcReplyPort<PoolPolicy>),
    /// Adopt a NodeClaim whose instance survived a restart; the reply comes once its actor
    /// runs, so messages for it can be delivered from then on.
    AdoptNodeClaim(
        Box<NodeClaimPlan>,
        Box<karpenter_core::recovery::Adopt>,
        RpcReplyPort<()>,
    ),
    /// A NodeClaim launched (with its instance type) or terminated.
    NodeClaimChanged {
        /// NodeClaim name.
        nodeclaim: String,
        /// Its instance type, once launched.
        instance_type: Option<String>,
        /// Whether it is gone.
        terminated: bool,
    },
    /// The NodePool object changed: later rounds and NodeClaims use the new template;
    /// existing NodeClaims keep theirs.
    Update(Box<NodePool>),
    /// A NodeClaim's node registered (`None`), or it failed to launch or register (why).
    RegistrationOutcome(Option<String>),
    /// The node class changed: earlier registration outcomes say nothing about it.
    NodeClassChanged,
    /// Current state, for the admin endpoint and the NodePool's status.
    GetStatus(RpcReplyPort<NodePoolStatus>),
}

/// A NodePool actor's state as the admin endpoint shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodePoolStatus {
    /// Name.
    pub name: String,
    /// Weight.
    pub weight: i32,
    /// Live NodeClaims.
    pub nodeclaims: Vec<String>,
    /// What its latest NodeClaims' launches and registrations say (`NodeRegistrationHealthy`);
    /// `None` when they cannot tell yet.
    pub registration: Option<karpenter_core::model::registration_health::Verdict>,
    /// Capacity counted against limits (Kubernetes quantities).
    pub usage: BTreeMap<String, String>,
    /// Limits (Kubernetes quantities).
    pub limits: BTreeMap<String, String>,
    /// Its disruption settings: consolidation policy, `consolidateAfter`, budgets.
    pub disruption: karpenter_core::api::nodepool::Disruption,
}

/// A NodePool as the next round sees it: its template, and `spec.replicas` when static.
pub type PoolTemplate = (NodePoolTemplate, Option<i64>);

/// Messages to the scheduler.
#[derive(Debug)]
pub enum SchedulerMsg {
    /// kube-scheduler could not place this pod.
    PodPending(Box<Pod>),
    /// A pod was bound to a node.
    PodBound {
        /// UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// Node.
        node: String,
    },
    /// A pod was deleted.
    PodDeleted {
        /// UID.
        uid: String,
    },
    /// Check whether the batch window closed.
    Tick,
    /// A static NodePool has fewer NodeClaims than replicas: the next round launches what it
    /// lacks, even with no pod pending.
    StaticPoolShort,
    /// A CapacityBuffer, or what it refers to, changed: a round runs even with no pod
    /// pending.
    BuffersChanged,
    /// Time to look at pods still pending and at nominations kube-scheduler did not honour.
    Retry,
    /// Register a NodePool actor.
    AddNodePool(ActorRef<NodePoolMsg>),
    /// Stop planning for a NodePool (deleted or invalid); its NodeClaims live on.
    RemoveNodePool(ActorRef<NodePoolMsg>),
    /// A NodeClaim launched its instance.
    NodeClaimLaunched {
        /// NodeClaim.
        nodeclaim: String,
        /// Instance.
        instance: Box<Instance>,
        /// The NodeClaim's labels, which its Node will register with.
        labels: BTreeMap<String, String>,
    },
    /// A NodeClaim ended (or was refused); its unbound pods are pending again.
    NodeClaimEnded {
        /// NodeClaim.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// Current state, for the admin endpoint and the simulator's progress line.
    GetStatus(RpcReplyPort<SchedulerStatus>),
    /// What every disruption pass needs of the scheduler: the NodePools it plans for and
    /// the NodeClaims pods are nominated to.
    DisruptionView(RpcReplyPort<SchedulerView>),
    /// What a disruption pass that moves pods needs: the round the scheduler would run now,
    /// its instance types recorded.
    DisruptionBase(RpcReplyPort<DisruptionBase>),
    /// The digests of the instance-type sets the scheduler takes as recorded (it does not
    /// record them again before using them): the journal keeper keeps them past a cut.
    RecordedCatalogs(RpcReplyPort<std::collections::BTreeSet<String>>),
    /// A disruption command takes these nodes: no round places pods on them until they are
    /// released. Refused, with the NodeClaims concerned, when pods were nominated to any of
    /// them meanwhile (`force` takes them anyway: a command resumed after a restart).
    HoldNodes {
        /// The NodeClaims.
        nodeclaims: Vec<String>,
        /// Their nodes.
        nodes: Vec<String>,
        /// Take them even if pods are nominated to them.
        force: bool,
        /// `Err` with the nominated NodeClaims when refused.
        reply: RpcReplyPort<Result<(), Vec<String>>>,
    },
    /// A disruption command no longer holds these nodes.
    ReleaseNodes(Vec<String>),
    /// A disruption command's replacements, recorded as planned: pending pods planned onto
    /// them are nominated to them, and the pods that will move keep their room until
    /// released.
    Replacements {
        /// The replacements, with the requirements they launch under.
        plans: Vec<(NodeClaimPlan, Requirements)>,
        /// Pods that will move there, by replacement.
        moved: Vec<(String, Pod)>,
    },
    /// The moved pods no longer need the room kept for them on these replacements.
    ReleaseReservations(Vec<String>),
}

/// What every disruption pass reads of the scheduler.
#[derive(Debug, Clone, Default)]
pub struct SchedulerView {
    /// The NodePools it plans for.
    pub nodepools: std::collections::BTreeSet<String>,
    /// NodeClaims with pods nominated to them.
    pub nominated: std::collections::BTreeSet<String>,
    /// The last round's number.
    pub round: u64,
    /// Nodes and NodeClaims the last round found hosting CapacityBuffers' virtual pods.
    pub buffered: std::collections::BTreeSet<String>,
    /// Workloads (`namespace/Kind/name`) with pods it is still provisioning for: pending
    /// or nominated, and not found unschedulable.
    pub scaling_out: std::collections::BTreeSet<String>,
}

/// The round the scheduler would run now, for a disruption pass's simulation.
#[derive(Debug, Clone, Default)]
pub struct DisruptionBase {
    /// The round's input.
    pub input: SchedulingInput,
    /// The digest each of its NodePools' instance types is recorded under.
    pub catalogs: Vec<String>,
}

/// Messages to the disruption controller.
#[derive(Debug)]
pub enum DisruptionMsg {
    /// Time for a pass: the poll timer's (`timer`), or at once after acting.
    Pass {
        /// Sent by the poll timer.
        timer: bool,
    },
    /// Time to move commands in flight on.
    Advance,
    /// Time to check the consolidation command waiting for validation again.
    Validate,
    /// Its state, for the admin endpoint.
    GetStatus(RpcReplyPort<DisruptionStatus>),
}

/// The disruption controller's state as the admin endpoint shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DisruptionStatus {
    /// Passes run.
    pub passes: u64,
    /// Commands decided so far (the last command's number).
    pub last_command: u64,
    /// Commands in flight.
    pub commands: Vec<Command>,
    /// What the last pass saw and decided.
    pub last_pass: Option<PassSummary>,
    /// Commands that ended, by method and outcome (`Done`, `Abandoned`).
    pub ended: BTreeMap<String, u64>,
    /// NodeClaims expired so far.
    pub expired: u64,
    /// Scheduling simulations run so far.
    pub simulations: u64,
    /// The consolidation command waiting for validation: method and candidates.
    pub validating: Option<(String, Vec<String>)>,
    /// Consolidation commands given up at validation (`ConsolidationRejected`).
    pub rejected: u64,
}

/// What one disruption pass saw and decided.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PassSummary {
    /// When (journal clock, ms since the Unix epoch).
    pub at_ms: i64,
    /// NodeClaims it looked at.
    pub nodeclaims: usize,
    /// Per method, the nodes it could disrupt before budgets.
    pub eligible: BTreeMap<String, usize>,
    /// Per pool and reason, the nodes its budgets still allow.
    pub allowed: BTreeMap<String, usize>,
    /// The command it started, if any.
    pub command: Option<u64>,
    /// Nodes a method wanted and could not take, with why.
    pub blocked: BTreeMap<String, String>,
    /// How long it took to decide, in microseconds.
    pub duration_us: u64,
    /// Scheduling simulations it ran.
    pub simulations: usize,
}

/// Where the disruption controller starts from: commands a previous run left unfinished.
#[derive(Debug, Clone, Default)]
pub struct DisruptionStart {
    /// The last command's number in the journal.
    pub last_command: u64,
    /// Commands in flight when it stopped.
    pub commands: Vec<Command>,
}

/// The scheduler's state as the admin endpoint shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SchedulerStatus {
    /// Pods waiting for a round.
    pub pending: usize,
    /// The first [`PENDING_LISTED`] of them by UID.
    pub pending_pods: Vec<PendingPod>,
    /// Pods nominated to in-flight NodeClaims.
    pub nominated: usize,
    /// Pods the last round could not place, with the reason.
    pub unschedulable: BTreeMap<String, String>,
    /// Whether a batch window is open.
    pub batching: bool,
    /// The last round.
    pub last_round: Option<RoundRecord>,
    /// Rounds run.
    pub rounds: u64,
    /// The last round that planned NodeClaims.
    pub last_planning_round: Option<u64>,
}

/// How many pending pods [`SchedulerStatus`] lists.
pub const PENDING_LISTED: usize = 200;

/// A pod waiting for a round, as the admin endpoint lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PendingPod {
    /// UID.
    pub uid: String,
    /// `namespace/name`.
    pub pod: String,
    /// Requests (Kubernetes quantities).
    pub requests: BTreeMap<String, String>,
}

/// Messages to an interruption actor.
#[derive(Debug)]
pub enum InterruptionMsg {
    /// A parsed notice about an instance.
    Notice {
        /// Instance id.
        instance_id: String,
        /// Kind of notice.
        kind: InterruptionKind,
    },
    /// Counts, for the admin endpoint and the report.
    GetStatus(RpcReplyPort<InterruptionStatus>),
    /// A notice whose instance could not be looked up, tried again (not counted again).
    RouteAgain {
        /// Instance id.
        instance_id: String,
        /// Kind of notice.
        kind: InterruptionKind,
        /// Tries so far after the first.
        attempt: u32,
    },
    /// Start the next long poll of the queue.
    Poll,
    /// Ask the cloud which instances run in an expiring Capacity Block.
    CheckBlocks,
    /// What the cloud answered.
    BlocksChecked(Result<Option<Vec<String>>, String>),
    /// What a poll returned.
    Received(Result<Vec<QueueMessage>, String>),
}

/// What the actor has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterruptionStatus {
    /// Queue messages received (any kind), and notices handed in directly.
    pub received: u64,
    /// Notices delivered to a NodeClaim.
    pub delivered: u64,
    /// Notices about instances no NodeClaim owns.
    pub unowned: u64,
    /// Queue messages handled and deleted.
    pub messages_deleted: u64,
    /// Queue messages that were malformed or of an unsupported kind.
    pub messages_malformed: u64,
    /// Failed receives or deletes (retried).
    pub queue_errors: u64,
}

/// Garbage collector settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcSettings {
    /// How often it runs.
    pub interval: Duration,
    /// Instances younger than this are never collected: a launch may still be on its way to
    /// the journal, and an instance of a shared CreateFleet call carries its NodeClaim's tag
    /// only once the CreateTags after it is done.
    pub grace: Duration,
}

impl Default for GcSettings {
    fn default() -> Self {
        GcSettings {
            interval: Duration::from_secs(120),
            grace: Duration::from_secs(300),
        }
    }
}

/// Messages to the garbage collector.
#[derive(Debug)]
pub enum GcMsg {
    /// Run a pass now.
    Run,
    /// Totals so far.
    GetStatus(RpcReplyPort<GcStatus>),
}

/// Totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcStatus {
    /// Passes run.
    pub passes: u64,
    /// Leaked instances terminated.
    pub instances_collected: u64,
    /// NodeClaims finalized because their instance was gone.
    pub nodeclaims_finalized: u64,
    /// Instances past the grace period without a NodeClaim tag the last pass saw (never
    /// collected; a restart's recovery terminates them).
    pub untagged: u64,
    /// Passes that failed (cloud errors, no answer about launch intents); retried next
    /// interval, and what they would have confirmed is seen twice again first.
    pub failures: u64,
}

/// The actors the supervisor started.
#[derive(Debug, Clone)]
pub struct Actors {
    /// The scheduler.
    pub scheduler: ActorRef<SchedulerMsg>,
    /// One per NodePool, in the order given.
    pub nodepools: Vec<ActorRef<NodePoolMsg>>,
    /// The interruption stream.
    pub interruption: ActorRef<InterruptionMsg>,
    /// The garbage collector, when enabled.
    pub gc: Option<ActorRef<GcMsg>>,
    /// The disruption controller, once started.
    pub disruption: Option<ActorRef<DisruptionMsg>>,
    /// The journal keeper.
    pub keeper: ActorRef<KeeperMsg>,
    /// The journal shipper, when the journal is shipped.
    pub shipper: Option<ActorRef<super::shipper::ShipperMsg>>,
}

/// Messages to the supervisor.
#[derive(Debug)]
pub enum SupervisorMsg {
    /// The started actors.
    GetActors(RpcReplyPort<Actors>),
    /// Children that failed so far, with their error.
    GetFailures(RpcReplyPort<Vec<String>>),
    /// A NodePool was created or changed: update its actor, or start one.
    ApplyNodePool(Box<NodePool>),
    /// A NodePool was deleted (or became invalid): plan nothing more for it. Its actor
    /// stays while its NodeClaims live (they are its children), and takes the pool back
    /// if it is applied again.
    RemoveNodePool(String),
    /// Run an actor for a NodePool that plans nothing (it is invalid), so NodeClaims of it
    /// that a restart finds can be adopted and later drained as usual; applying the pool
    /// once it is valid lets it plan again. Replies once the actor runs.
    HostNodePool(Box<NodePool>, RpcReplyPort<()>),
    /// Start the garbage collector (if it is not running): sent once every surviving
    /// NodeClaim has been adopted, since before that their instances look leaked.
    StartGc(GcSettings),
    /// Start the disruption controller (if it is not running): sent once every surviving
    /// NodeClaim has been adopted, since before that commands in flight would find their
    /// NodeClaims gone.
    StartDisruption(DisruptionStart),
}

/// Messages to the keeper.
#[derive(Debug)]
pub enum KeeperMsg {
    /// Snapshot and trim now.
    Run,
    /// The NodeClaims whose launch intent the journal holds open, as of now.
    OpenLaunches(RpcReplyPort<std::collections::BTreeSet<String>>),
    /// Totals so far.
    GetStatus(RpcReplyPort<KeeperStatus>),
}

/// Totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KeeperStatus {
    /// Snapshots saved.
    pub snapshots: u64,
    /// The latest snapshot's sequence number.
    pub snapshot_seq: u64,
    /// Snapshots kept as checkpoints.
    pub checkpoints: u64,
    /// Retention passes that removed history.
    pub trims: u64,
    /// The last sequence number removed (0 when none).
    pub trimmed_through: u64,
    /// Events removed.
    pub removed_events: u64,
    /// Bytes of event records removed.
    pub removed_bytes: u64,
    /// Instance-type sets recorded again before a cut.
    pub catalogs_carried: u64,
    /// Passes that failed (journal errors); retried next interval.
    pub failures: u64,
}
