//! The NodeClaim lifecycle as a pure state machine: [`decide`] turns what happened (an
//! [`Input`]) into what to do ([`Command`]s), and the journaled part of the state changes
//! only by folding the events it records through [`NodeClaimView::apply`], the same fold
//! `journal replay` and a restart use. The NodeClaim actor interprets the commands: it
//! records events, writes the object, calls the cloud and the cluster, arms timers, and
//! feeds each result back as the next input.
//!
//! Pending → Launched → Registered → Initialized → Draining → Terminating → Terminated.
//! Every transition is a journaled event (`NodeClaimLaunched`, `NodeClaimRegistered`,
//! `NodeClaimInitialized`, `NodeClaimDraining`, `NodeClaimTerminating`,
//! `NodeClaimTerminated`); an input that means nothing in the current phase is answered with
//! [`Command::Ignore`], which the actor logs with the phase.

use std::sync::Arc;
use std::time::Duration;

use crate::api::NodeClaim;
use crate::api::NodePool;
use crate::api::nodeclaim::condition;
use crate::events::{DomainEvent, NodeClaimState, NodeClaimView};
use crate::model::InstanceType;
use crate::ports::{
    CloudError, ClusterError, EventObject, Instance, InterruptionKind, LaunchRequest, OfferingKey,
};

mod adopted;
pub mod disruption;

pub use adopted::adopted;

use disruption::{
    consolidatable, disrupt, drift_condition, drifted, mark_disrupted, restamp_class,
};

/// The lifecycle's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A launch that has not succeeded by then is abandoned.
    pub launch_timeout: Duration,
    /// A launched instance whose node has not registered by then is terminated.
    pub registration_timeout: Duration,
    /// How long before a failed write, cordon, termination or release (or a drain still
    /// waiting) is tried again.
    pub retry: Duration,
    /// How often a launched NodeClaim asks the cloud whether it drifted from its node class
    /// (upstream requeues its drift check every 5 minutes).
    pub drift_check: Duration,
}

/// One NodeClaim as its actor holds it: the journaled view (changed only by
/// [`NodeClaimView::apply`]), its API object and the progress of its I/O (changed only by
/// [`Live::update`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    /// Name.
    pub name: String,
    /// What the journal says (state, instance, node, reason, …).
    pub view: NodeClaimView,
    /// The API object as it is written (labels, status, conditions).
    pub object: NodeClaim,
    /// The launch request, as planned.
    pub launch: LaunchRequest,
    /// The instance types it may launch as, for the capacity it reports once launched.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// The object has been written at least once (it exists, holding the finalizer).
    pub object_exists: bool,
    /// A failed object write is waiting to be retried.
    pub write_retry_pending: bool,
    /// Launches tried.
    pub launch_attempts: u32,
    /// The node has been cordoned for the drain.
    pub cordoned: bool,
    /// The wait for volumes to detach has been reported (once).
    pub awaiting_volumes: bool,
    /// When the drain's terminationGracePeriod started counting (journal clock, ms).
    pub drain_since_ms: Option<i64>,
    /// The disruption a command marked it for (the `DisruptionReason` condition and the
    /// `karpenter.sh/disrupted:NoSchedule` taint on its node), while one does.
    pub disruption: Option<String>,
    /// Why it no longer matches its NodePool (`NodePoolDrifted`, `RequirementsDrifted`), as
    /// its pool was when last shown to it.
    pub pool_drift: Option<(String, String)>,
    /// Why it no longer matches its node class (`AMIDrift`, `SubnetDrift`, …), as the cloud
    /// last said.
    pub provider_drift: Option<(String, String)>,
}

/// What happened to a NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Write the object (first write, or a retry after a failure).
    WriteDue,
    /// An object write finished.
    Written(Result<(), WriteFailure>),
    /// Time to call the cloud.
    LaunchDue,
    /// The cloud answered the launch.
    LaunchResult(Result<Instance, CloudError>),
    /// The launch deadline passed.
    LaunchDeadline,
    /// Its node joined the cluster.
    NodeRegistered {
        /// Node name.
        node: String,
    },
    /// Its node became Ready.
    NodeReady,
    /// The registration deadline passed.
    RegistrationDeadline,
    /// An interruption notice arrived for its instance.
    Interrupted {
        /// Kind of notice.
        kind: InterruptionKind,
    },
    /// Its NodeClaim or Node object was deleted at `since_ms` (journal clock), if known.
    Deleted {
        /// When the deletion was requested.
        since_ms: Option<i64>,
    },
    /// Its NodePool as it is now.
    NodePoolChanged(Box<NodePool>),
    /// Its node class's hash as it is now: a NodeClaim stamped by another controller (a
    /// hash of another version, or none) takes it, so later changes of the class drift it.
    NodeClassHash(crate::ports::NodeClassHash),
    /// Time for a drain pass (or to retry terminating and releasing).
    DrainDue,
    /// The cordon finished.
    Cordoned(Result<(), ClusterError>),
    /// A drain pass finished.
    DrainPassed(DrainReport),
    /// Terminating the instance finished.
    InstanceDeleted(Result<(), CloudError>),
    /// Releasing the object finished.
    Released(Result<(), ClusterError>),
    /// Laying the object's labels and taints over the node finished.
    NodeSynced(Result<(), ClusterError>),
    /// Time to sync the node again after a failed sync.
    SyncDue,
    /// Deleting the Node object finished.
    NodeDeleted(Result<(), ClusterError>),
    /// Its node or instance disappeared without the NodeClaim asking.
    NodeGone {
        /// What happened.
        reason: String,
    },
    /// A disruption command marks it (`Some(reason)`: the `DisruptionReason` condition and
    /// the `karpenter.sh/disrupted:NoSchedule` taint, so nothing new lands on its node) or
    /// lets it go again (`None`).
    MarkDisrupted {
        /// The disruption reason (`Empty`, `Drifted`, …), or `None` to take the mark back.
        reason: Option<String>,
    },
    /// Marking or unmarking its node finished.
    Marked(Result<(), ClusterError>),
    /// Disrupt it now for `reason` (`empty`, `drifted`, `expired`, …): drained within its
    /// PodDisruptionBudgets, then terminated; its terminationGracePeriod counts from now.
    Disrupt {
        /// Why, as metrics label it.
        reason: String,
    },
    /// Its `Consolidatable` condition as the disruption controller judges it now.
    Consolidatable(bool),
    /// What the cloud says about its drift from its node class (`None`: not drifted).
    ProviderDrift(Option<(String, String)>),
    /// Time to ask the cloud about its drift again.
    DriftDue,
    /// Its node class (or the images it resolves to) changed: ask the cloud about its drift
    /// now, besides the regular checks.
    NodeClassChanged,
}

/// Why an object write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// Its NodePool no longer exists, so the object cannot be created.
    pub gone: bool,
    /// The error.
    pub message: String,
}

/// What a drain pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// No pod is left to deal with (or the grace period expired).
    pub pods_gone: bool,
    /// VolumeAttachments still bound to the node (counted once the pods are gone).
    pub attached_volumes: usize,
}

/// What the actor does.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Append events to the journal (and fold them into the view).
    Record(Vec<DomainEvent>),
    /// Append events and wait until they are on disk (write-ahead records).
    RecordDurably(Vec<DomainEvent>),
    /// Change the actor's own bookkeeping or the object (see [`Live::update`]).
    Update(Update),
    /// Call the cloud or the cluster; the result comes back as an input.
    Call(Call),
    /// Tell the cloud these offerings have no capacity now.
    MarkUnavailable(Vec<OfferingKey>),
    /// Send `input` to itself after `after`.
    After(Duration, Input),
    /// Send `input` to itself now (behind what is already queued).
    Next(Input),
    /// A Kubernetes Event.
    Emit {
        /// What it is about.
        object: EventObject,
        /// Upstream's reason.
        reason: String,
        /// Message.
        message: String,
    },
    /// Tell the scheduler the instance launched.
    SchedulerLaunched(Instance),
    /// Tell the scheduler the NodeClaim ended: its unbound pods are pending again.
    SchedulerEnded(String),
    /// Tell the NodePool what it now counts (instance type, terminated).
    PoolCounts,
    /// Tell the NodePool a registration outcome (`None`: registered).
    PoolRegistration(Option<String>),
    /// Count a metric.
    Metric(Metric),
    /// Log, at info (`warn: false`) or warn.
    Log {
        /// Warn rather than inform.
        warn: bool,
        /// What.
        message: String,
    },
    /// An input that means nothing in this phase: logged with the phase.
    Ignore {
        /// The input's name.
        input: &'static str,
        /// The phase it arrived in.
        phase: NodeClaimState,
    },
    /// Stop the actor.
    Stop,
}

/// A call to the cloud or the cluster, whose result comes back as an [`Input`]; the actor
/// runs it in a task of its own and decides nothing else until the result is in.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// Write the object; the result comes back as [`Input::Written`].
    WriteObject,
    /// Call the cloud; the result comes back as [`Input::LaunchResult`].
    Launch(LaunchRequest),
    /// Lay the object's labels and taints over the node; the result comes back as
    /// [`Input::NodeSynced`].
    SyncNode(String),
    /// Cordon the node; the result comes back as [`Input::Cordoned`].
    Cordon(String),
    /// Evict what can be evicted from the node (after the grace period: nothing, and say
    /// so on each pod); the outcome comes back as [`Input::DrainPassed`].
    DrainPass {
        /// Node.
        node: String,
        /// The terminationGracePeriod has passed: whatever is left goes with the node.
        expired: bool,
    },
    /// Terminate the instance; the result comes back as [`Input::InstanceDeleted`].
    DeleteInstance(String),
    /// Delete the Node object (not found is fine); the result comes back as
    /// [`Input::NodeDeleted`].
    DeleteNode(String),
    /// Let the object go; the result comes back as [`Input::Released`].
    Release,
    /// Ask the cloud whether the instance drifted from its node class (or its instance type
    /// or offering is gone); the answer comes back as [`Input::ProviderDrift`].
    CheckDrift,
    /// Taint the node `karpenter.sh/disrupted:NoSchedule` (`disrupted`) or take that taint
    /// off; the result comes back as [`Input::Marked`].
    MarkNode {
        /// Node.
        node: String,
        /// Taint (true) or untaint (false).
        disrupted: bool,
    },
}

/// A metric the lifecycle counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Metric {
    /// `karpenter_nodeclaims_created_total`.
    Created,
    /// `karpenter_cloudprovider_errors_total` for a launch.
    LaunchError(&'static str),
    /// `karpenter_nodeclaims_terminated_total` with the reason, and
    /// `karpenter_nodes_terminated_total` when it had a node.
    Terminated(String),
    /// `karpenter_nodes_created_total`: its node joined.
    NodeCreated,
    /// `karpenter_nodeclaims_disrupted_total` with the reason.
    Disrupted(String),
}

/// A change to the actor's bookkeeping or object.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// The object exists now.
    ObjectExists,
    /// A write retry is (or is no longer) waiting.
    WriteRetryPending(bool),
    /// Another launch is being tried.
    LaunchAttempt,
    /// The node is cordoned.
    Cordoned,
    /// The wait for volumes has been reported.
    AwaitingVolumes,
    /// The terminationGracePeriod counts from then (ms, journal clock).
    DrainSince(i64),
    /// Set a condition on the object.
    SetCondition {
        /// Type.
        type_: &'static str,
        /// True or False.
        status: bool,
        /// Reason.
        reason: String,
        /// Message.
        message: String,
    },
    /// Remove a condition from the object.
    RemoveCondition(&'static str),
    /// What launching tells the object (provider id, capacity, labels).
    ObjectLaunched(Instance),
    /// The node the object registered as.
    ObjectNode(String),
    /// The disruption it is marked for, or none.
    Disruption(Option<String>),
    /// Its drift from its NodePool.
    PoolDrift(Option<(String, String)>),
    /// Its drift from its node class.
    ProviderDrift(Option<(String, String)>),
    /// The NodePool hash (of the template as it is now) stamped under this controller's
    /// version, over another controller's.
    PoolHash(String),
    /// The node class hash stamped, over another controller's.
    ClassHash(crate::ports::NodeClassHash),
}

impl Live {
    /// Applies an [`Update`]; `now` stamps condition transitions.
    pub fn update(
        &mut self,
        update: &Update,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        match update {
            Update::ObjectExists => self.object_exists = true,
            Update::WriteRetryPending(pending) => self.write_retry_pending = *pending,
            Update::LaunchAttempt => self.launch_attempts += 1,
            Update::Cordoned => self.cordoned = true,
            Update::AwaitingVolumes => self.awaiting_volumes = true,
            Update::DrainSince(ms) => self.drain_since_ms = Some(*ms),
            Update::SetCondition {
                type_,
                status,
                reason,
                message,
            } => self
                .object
                .set_condition(type_, *status, reason, message, now),
            Update::RemoveCondition(type_) => {
                self.object.remove_condition(type_);
            }
            Update::ObjectLaunched(instance) => {
                let instance_type = self
                    .instance_types
                    .iter()
                    .find(|t| t.name == instance.instance_type)
                    .cloned();
                self.object
                    .launched(instance, instance_type.as_deref(), now);
            }
            Update::ObjectNode(node) => {
                self.object
                    .status
                    .get_or_insert_with(Default::default)
                    .node_name = Some(node.clone());
            }
            Update::Disruption(reason) => self.disruption = reason.clone(),
            Update::PoolDrift(drift) => self.pool_drift = drift.clone(),
            Update::ProviderDrift(drift) => self.provider_drift = drift.clone(),
            Update::PoolHash(hash) => {
                crate::api::nodeclaim::stamp_pool_hash(&mut self.object, hash)
            }
            Update::ClassHash(hash) => hash.stamp(&mut self.object),
        }
    }

    fn state(&self) -> NodeClaimState {
        self.view.state
    }

    fn record(&self, event: DomainEvent) -> Command {
        Command::Record(vec![event])
    }

    fn event_object(&self) -> EventObject {
        EventObject::NodeClaim(self.name.clone())
    }
}

fn condition_set(type_: &'static str, status: bool, reason: &str, message: &str) -> Command {
    Command::Update(Update::SetCondition {
        type_,
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    })
}

fn info(message: String) -> Command {
    Command::Log {
        warn: false,
        message,
    }
}

fn warn(message: String) -> Command {
    Command::Log {
        warn: true,
        message,
    }
}

/// What a new NodeClaim does first: the launch intent (with its idempotency token) on disk
/// before the cloud is called, so a restart knows a launch may exist; then the object, whose
/// first successful write starts the launch; and the launch deadline.
pub fn start(live: &Live, timing: &Timing) -> Vec<Command> {
    vec![
        Command::Metric(Metric::Created),
        Command::RecordDurably(vec![DomainEvent::LaunchRequested {
            nodeclaim: live.name.clone(),
            client_token: live.launch.client_token.clone(),
        }]),
        Command::Next(Input::WriteDue),
        Command::After(timing.launch_timeout, Input::LaunchDeadline),
    ]
}

/// What to do about `input`, given the NodeClaim as it is and the time (journal clock, ms).
pub fn decide(live: &Live, input: Input, now_ms: i64, timing: &Timing) -> Vec<Command> {
    use NodeClaimState as S;
    let state = live.state();
    match input {
        Input::WriteDue => vec![
            Command::Update(Update::WriteRetryPending(false)),
            Command::Call(Call::WriteObject),
        ],
        Input::Written(result) => written(live, result, timing),
        Input::LaunchDue if state == S::Pending => vec![
            Command::Update(Update::LaunchAttempt),
            Command::Call(Call::Launch(live.launch.clone())),
        ],
        Input::LaunchResult(result) if state == S::Pending => launch_result(live, result, timing),
        Input::LaunchDeadline if state == S::Pending => launch_deadline(live),
        Input::NodeRegistered { node } if state == S::Launched => registered(live, node),
        Input::NodeReady if state == S::Registered => vec![
            live.record(DomainEvent::NodeClaimInitialized {
                nodeclaim: live.name.clone(),
            }),
            condition_set(condition::INITIALIZED, true, condition::INITIALIZED, ""),
            Command::Call(Call::WriteObject),
        ],
        Input::RegistrationDeadline if state == S::Launched => {
            let mut out = vec![
                warn("Node did not register in time; terminating.".into()),
                Command::PoolRegistration(Some("registration_timeout".into())),
            ];
            out.extend(terminate(live, "registration_timeout"));
            out
        }
        Input::Interrupted { kind } if state < S::Draining && live.view.instance.is_some() => {
            interrupted(live, kind, now_ms)
        }
        Input::Deleted { since_ms } if state < S::Draining => deleted(live, since_ms, now_ms),
        Input::NodePoolChanged(pool) if state < S::Draining => drifted(live, &pool),
        Input::NodeClassHash(hash) if state < S::Draining => restamp_class(live, hash),
        Input::ProviderDrift(drift) if state < S::Draining => {
            let mut out = vec![Command::Update(Update::ProviderDrift(drift.clone()))];
            out.extend(drift_condition(
                live,
                live.pool_drift.as_ref().or(drift.as_ref()),
            ));
            out
        }
        Input::DriftDue if state < S::Draining && live.view.instance.is_some() => vec![
            Command::Call(Call::CheckDrift),
            Command::After(timing.drift_check, Input::DriftDue),
        ],
        Input::NodeClassChanged if state < S::Draining && live.view.instance.is_some() => {
            vec![Command::Call(Call::CheckDrift)]
        }
        Input::MarkDisrupted { reason } if state < S::Draining => mark_disrupted(live, reason),
        Input::Marked(Ok(())) => Vec::new(),
        Input::Marked(Err(error)) if state < S::Draining => retry(
            "Marking the node for disruption",
            &error,
            timing,
            Input::MarkDisrupted {
                reason: live.disruption.clone(),
            },
        ),
        Input::Disrupt { reason } if state < S::Draining => disrupt(live, &reason, now_ms),
        Input::Consolidatable(wanted) if state < S::Draining => consolidatable(live, wanted),
        Input::DrainDue if matches!(state, S::Draining | S::Terminating) => {
            drain(live, now_ms, timing)
        }
        Input::Cordoned(result) if matches!(state, S::Draining | S::Terminating) => {
            cordoned(live, result, now_ms, timing)
        }
        Input::DrainPassed(report) if matches!(state, S::Draining | S::Terminating) => {
            drain_passed(live, report, timing)
        }
        Input::InstanceDeleted(result) if state == S::Terminating => match result {
            Ok(()) => delete_node_then_release(live),
            // An instance must never be left running without its NodeClaim.
            Err(error) => retry("Terminating the instance", &error, timing, Input::DrainDue),
        },
        Input::Released(result) if state != S::Terminated => match result {
            Ok(()) => finish(live, &reason(live)),
            // Terminating already: the retry (a drain of nothing) ends in another release.
            Err(error) => retry(
                "Releasing the NodeClaim object",
                &error,
                timing,
                Input::DrainDue,
            ),
        },
        Input::NodeSynced(Ok(())) => Vec::new(),
        Input::NodeSynced(Err(error)) if matches!(state, S::Registered | S::Initialized) => retry(
            "Syncing the registered Node",
            &error,
            timing,
            Input::SyncDue,
        ),
        Input::SyncDue if matches!(state, S::Registered | S::Initialized) => live
            .view
            .node
            .iter()
            .map(|node| Command::Call(Call::SyncNode(node.clone())))
            .collect(),
        Input::NodeDeleted(result) if state == S::Terminating => match result {
            Ok(()) => vec![Command::Call(Call::Release)],
            // The Node keeps its termination finalizer until it is deleted: the object is
            // released only then, so the retry comes back here.
            Err(error) => retry("Deleting the Node", &error, timing, Input::DrainDue),
        },
        Input::NodeGone { reason } if state != S::Terminated => {
            let mut out = vec![warn(format!(
                "Node or instance gone ({reason}); finalizing."
            ))];
            // Deleting the instance and the Node again is harmless: both treat "not found"
            // as done.
            out.extend(terminate(live, &reason));
            out
        }
        other => vec![Command::Ignore {
            input: input_name(&other),
            phase: state,
        }],
    }
}

/// A call that failed: tried again after `timing.retry`, through `input`.
fn retry(what: &str, error: &dyn std::fmt::Display, timing: &Timing, input: Input) -> Vec<Command> {
    vec![
        warn(format!("{what} failed; retrying: {error}")),
        Command::After(timing.retry, input),
    ]
}

/// The launch did not succeed in time: recorded as failed, the pool told, the object let go.
fn launch_deadline(live: &Live) -> Vec<Command> {
    let mut out = vec![
        live.record(DomainEvent::LaunchFailed {
            nodeclaim: live.name.clone(),
            reason: "launch timeout".into(),
            unavailable: Vec::new(),
        }),
        Command::PoolRegistration(Some("launch_timeout".into())),
    ];
    out.extend(release(live, "launch_timeout"));
    out
}

/// Its node joined: recorded, the object and the node synced, the pool told.
fn registered(live: &Live, node: String) -> Vec<Command> {
    vec![
        live.record(DomainEvent::NodeClaimRegistered {
            nodeclaim: live.name.clone(),
            node: node.clone(),
        }),
        Command::Update(Update::ObjectNode(node.clone())),
        condition_set(condition::REGISTERED, true, condition::REGISTERED, ""),
        Command::Call(Call::SyncNode(node)),
        Command::Call(Call::WriteObject),
        Command::Metric(Metric::NodeCreated),
        Command::PoolRegistration(None),
    ]
}

/// Its object was deleted: a NodeClaim that never launched is let go at once (a launch still
/// in flight ends at its deadline or, once it returns, through the garbage collector); one
/// that did is drained first, its terminationGracePeriod counting from the deletion.
fn deleted(live: &Live, since_ms: Option<i64>, now_ms: i64) -> Vec<Command> {
    if live.view.instance.is_none() {
        let mut out = vec![info(
            "NodeClaim deleted before it launched; releasing it.".into(),
        )];
        out.extend(release(live, "deleted"));
        return out;
    }
    let mut out = vec![info(
        "NodeClaim deleted; draining before termination.".into(),
    )];
    out.extend(start_draining(
        live,
        "deleted",
        since_ms.unwrap_or(now_ms).min(now_ms),
    ));
    out
}

/// The reason the NodeClaim is ending, as the journal says (`interrupted` if it never said).
fn reason(live: &Live) -> String {
    live.view
        .reason
        .clone()
        .unwrap_or_else(|| "interrupted".into())
}

fn input_name(input: &Input) -> &'static str {
    match input {
        Input::WriteDue => "WriteDue",
        Input::Written(_) => "Written",
        Input::LaunchDue => "LaunchDue",
        Input::LaunchResult(_) => "LaunchResult",
        Input::LaunchDeadline => "LaunchDeadline",
        Input::NodeRegistered { .. } => "NodeRegistered",
        Input::NodeReady => "NodeReady",
        Input::RegistrationDeadline => "RegistrationDeadline",
        Input::Interrupted { .. } => "Interrupted",
        Input::Deleted { .. } => "Deleted",
        Input::NodePoolChanged(_) => "NodePoolChanged",
        Input::NodeClassHash(_) => "NodeClassHash",
        Input::DrainDue => "DrainDue",
        Input::Cordoned(_) => "Cordoned",
        Input::DrainPassed(_) => "DrainPassed",
        Input::InstanceDeleted(_) => "InstanceDeleted",
        Input::Released(_) => "Released",
        Input::NodeSynced(_) => "NodeSynced",
        Input::SyncDue => "SyncDue",
        Input::NodeDeleted(_) => "NodeDeleted",
        Input::NodeGone { .. } => "NodeGone",
        Input::MarkDisrupted { .. } => "MarkDisrupted",
        Input::Marked(_) => "Marked",
        Input::Disrupt { .. } => "Disrupt",
        Input::Consolidatable(_) => "Consolidatable",
        Input::ProviderDrift(_) => "ProviderDrift",
        Input::DriftDue => "DriftDue",
        Input::NodeClassChanged => "NodeClassChanged",
    }
}

fn written(live: &Live, result: Result<(), WriteFailure>, timing: &Timing) -> Vec<Command> {
    let first = !live.object_exists;
    match result {
        Ok(()) => {
            let mut out = vec![Command::Update(Update::ObjectExists)];
            // The launch follows the object's first successful write, so the object (with
            // its finalizer) exists before any instance does.
            if first && live.state() == NodeClaimState::Pending {
                out.push(Command::Next(Input::LaunchDue));
            }
            out
        }
        Err(WriteFailure {
            gone: true,
            message,
        }) if first => {
            let mut out = vec![
                warn(format!("Not launching: its NodePool is gone: {message}")),
                live.record(DomainEvent::LaunchFailed {
                    nodeclaim: live.name.clone(),
                    reason: message,
                    unavailable: Vec::new(),
                }),
            ];
            out.extend(finish(live, "nodepool_deleted"));
            out
        }
        Err(WriteFailure { gone: true, .. }) => Vec::new(),
        Err(WriteFailure { message, .. }) => {
            let mut out = vec![warn(format!(
                "Writing the NodeClaim object failed; retrying: {message}"
            ))];
            if !live.write_retry_pending {
                out.push(Command::Update(Update::WriteRetryPending(true)));
                out.push(Command::After(timing.retry, Input::WriteDue));
            }
            out
        }
    }
}

fn launch_result(
    live: &Live,
    result: Result<Instance, CloudError>,
    timing: &Timing,
) -> Vec<Command> {
    match result.map(|i| overlay_priced(live, i)) {
        Ok(instance) => vec![
            live.record(DomainEvent::NodeClaimLaunched {
                nodeclaim: live.name.clone(),
                instance: Box::new(instance.clone()),
            }),
            // The actor logs the launch ("Launched.", with the instance's fields).
            Command::SchedulerLaunched(instance.clone()),
            Command::Update(Update::ObjectLaunched(instance)),
            Command::Call(Call::WriteObject),
            Command::PoolCounts,
            Command::After(timing.registration_timeout, Input::RegistrationDeadline),
            Command::After(timing.drift_check, Input::DriftDue),
        ],
        Err(CloudError::InsufficientCapacity { offerings }) => {
            let reason = format!("insufficient capacity for {} offering(s)", offerings.len());
            let mut out = vec![
                Command::Metric(Metric::LaunchError("insufficient_capacity")),
                Command::MarkUnavailable(offerings.clone()),
                live.record(DomainEvent::LaunchFailed {
                    nodeclaim: live.name.clone(),
                    reason: reason.clone(),
                    unavailable: offerings,
                }),
                Command::Emit {
                    object: live.event_object(),
                    reason: "InsufficientCapacityError".into(),
                    message: reason,
                },
            ];
            out.extend(release(live, "insufficient_capacity"));
            out
        }
        Err(error) => {
            let mut out = vec![
                Command::Metric(Metric::LaunchError(error.metric_label())),
                live.record(DomainEvent::LaunchFailed {
                    nodeclaim: live.name.clone(),
                    reason: error.to_string(),
                    unavailable: Vec::new(),
                }),
            ];
            if let CloudError::NodeClassNotReady { name, reason } = &error {
                // Credentials, permissions or unresolvable selectors: say so where people
                // look, instead of only retrying.
                out.push(Command::Emit {
                    object: live.event_object(),
                    reason: "NodeClassNotReady".into(),
                    message: format!("EC2NodeClass {name} is not ready: {reason}"),
                });
            }
            let backoff = Duration::from_secs(1 << live.launch_attempts.min(6));
            out.push(warn(format!(
                "Launch failed; retrying in {backoff:?}: {error}"
            )));
            out.push(Command::After(backoff, Input::LaunchDue));
            out
        }
    }
}

/// The instance at the price a NodeOverlay set for its offering, as the round chose it,
/// its source saying so.
fn overlay_priced(live: &Live, mut instance: Instance) -> Instance {
    use crate::model::overlay::overlay_price;
    let at = (
        &instance.instance_type,
        &instance.zone,
        instance.capacity_type,
    );
    if let Some((overlay, price)) = overlay_price(&live.instance_types, at.0, at.1, at.2) {
        let cloud = instance.price_source.as_deref().unwrap_or("cloud's price");
        instance.price_source = Some(format!(
            "NodeOverlay {overlay}; without it ${:.4}/h, the {cloud}",
            instance.price
        ));
        instance.price = price;
    }
    instance
}

fn interrupted(live: &Live, kind: InterruptionKind, now_ms: i64) -> Vec<Command> {
    let instance_id = live
        .view
        .instance
        .as_ref()
        .map(|i| i.id.clone())
        .unwrap_or_default();
    let object = match &live.view.node {
        Some(node) => EventObject::Node(node.clone()),
        None => live.event_object(),
    };
    let received = live.record(DomainEvent::InterruptionReceived {
        nodeclaim: live.name.clone(),
        instance_id: instance_id.clone(),
        kind,
    });
    if !kind.disrupts() {
        return vec![
            received,
            Command::Emit {
                object,
                reason: kind.event_reason().into(),
                message: format!("Instance {instance_id} received {}", kind.as_str()),
            },
        ];
    }
    let mut out = vec![
        Command::Emit {
            object,
            reason: kind.event_reason().into(),
            message: format!(
                "Instance {instance_id} received {}; cordoning and draining",
                kind.as_str()
            ),
        },
        received,
    ];
    out.extend(start_draining(live, kind.as_str(), now_ms));
    out
}

/// Starts draining (cordon, then evictions) for `reason`; the terminationGracePeriod counts
/// from `since_ms`.
fn start_draining(live: &Live, reason: &str, since_ms: i64) -> Vec<Command> {
    vec![
        live.record(DomainEvent::NodeClaimDraining {
            nodeclaim: live.name.clone(),
            reason: reason.to_owned(),
        }),
        Command::Update(Update::DrainSince(since_ms)),
        condition_set(condition::DRAINED, false, "Draining", "Draining the node"),
        Command::Call(Call::WriteObject),
        // The first drain pass cordons the node before it evicts anything.
        Command::Next(Input::DrainDue),
    ]
}

/// Whether the terminationGracePeriod has run out (from the start, for a forceful
/// disruption).
fn grace_expired(live: &Live, now_ms: i64) -> bool {
    if live.view.reason.as_deref() == Some(disruption::FORCEFUL_REASON) {
        return true;
    }
    match (
        &live.object.spec.termination_grace_period,
        live.drain_since_ms,
    ) {
        (Some(grace), Some(since)) => {
            now_ms.saturating_sub(since) >= i64::try_from(grace.0.as_millis()).unwrap_or(i64::MAX)
        }
        _ => false,
    }
}

fn drain(live: &Live, now_ms: i64, timing: &Timing) -> Vec<Command> {
    let expired = grace_expired(live, now_ms);
    match &live.view.node {
        // Evicting from a node that still takes pods would let them come straight back.
        Some(node) if !expired && !live.cordoned => vec![Command::Call(Call::Cordon(node.clone()))],
        Some(node) => vec![Command::Call(Call::DrainPass {
            node: node.clone(),
            expired,
        })],
        None => drain_passed(
            live,
            DrainReport {
                pods_gone: true,
                attached_volumes: 0,
            },
            timing,
        ),
    }
}

fn cordoned(
    live: &Live,
    result: Result<(), ClusterError>,
    now_ms: i64,
    timing: &Timing,
) -> Vec<Command> {
    let Some(node) = live.view.node.clone() else {
        return Vec::new();
    };
    match result {
        Ok(()) => vec![
            Command::Update(Update::Cordoned),
            Command::Call(Call::DrainPass {
                node,
                expired: grace_expired(live, now_ms),
            }),
        ],
        Err(error) => vec![
            warn(format!(
                "Cordoning node {node} failed; retrying before evicting anything: {error}"
            )),
            Command::Emit {
                object: live.event_object(),
                reason: "FailedDraining".into(),
                message: format!("Cordoning node {node} failed: {error}"),
            },
            Command::After(timing.retry, Input::DrainDue),
        ],
    }
}

fn drain_passed(live: &Live, report: DrainReport, timing: &Timing) -> Vec<Command> {
    if report.pods_gone && report.attached_volumes == 0 {
        let mut out = Vec::new();
        if live.state() == NodeClaimState::Draining {
            out.push(condition_set(
                condition::DRAINED,
                true,
                condition::DRAINED,
                "",
            ));
        }
        out.extend(terminate(live, &reason(live)));
        return out;
    }
    let mut out = Vec::new();
    if report.attached_volumes > 0 && !live.awaiting_volumes {
        out.push(Command::Update(Update::AwaitingVolumes));
        out.push(Command::Emit {
            object: live.event_object(),
            reason: "AwaitingVolumeDetachment".into(),
            message: format!(
                "Awaiting deletion of {} VolumeAttachment(s) bound to node {}",
                report.attached_volumes,
                live.view.node.as_deref().unwrap_or_default()
            ),
        });
    }
    out.push(Command::After(timing.retry, Input::DrainDue));
    out
}

/// Terminates the instance (then deletes the Node and, once it is gone, releases the
/// object).
fn terminate(live: &Live, reason: &str) -> Vec<Command> {
    let mut out = Vec::new();
    if live.state() != NodeClaimState::Terminating {
        out.push(live.record(DomainEvent::NodeClaimTerminating {
            nodeclaim: live.name.clone(),
            reason: reason.to_owned(),
        }));
        out.push(condition_set(
            condition::INSTANCE_TERMINATING,
            true,
            "InstanceTerminating",
            "Terminating the instance",
        ));
        out.push(Command::Call(Call::WriteObject));
    }
    match &live.view.instance {
        Some(instance) => out.push(Command::Call(Call::DeleteInstance(instance.id.clone()))),
        None => out.extend(delete_node_then_release(live)),
    }
    out
}

/// Once the instance is gone: the Node object, then (when that is gone) the NodeClaim.
fn delete_node_then_release(live: &Live) -> Vec<Command> {
    match &live.view.node {
        Some(node) => vec![Command::Call(Call::DeleteNode(node.clone()))],
        None => vec![Command::Call(Call::Release)],
    }
}

/// Releases the object, then ends (for NodeClaims with no instance to terminate): Terminating
/// is journaled with `reason` first, so the end carries it even when the release is retried.
fn release(live: &Live, reason: &str) -> Vec<Command> {
    let mut out = Vec::new();
    if live.state() != NodeClaimState::Terminating {
        out.push(live.record(DomainEvent::NodeClaimTerminating {
            nodeclaim: live.name.clone(),
            reason: reason.to_owned(),
        }));
    }
    out.push(Command::Call(Call::Release));
    out
}

/// Ends the NodeClaim: records it, hands its unbound pods back to the scheduler, tells its
/// NodePool and stops.
fn finish(live: &Live, reason: &str) -> Vec<Command> {
    vec![
        Command::Metric(Metric::Terminated(reason.to_owned())),
        live.record(DomainEvent::NodeClaimTerminated {
            nodeclaim: live.name.clone(),
            reason: reason.to_owned(),
        }),
        Command::SchedulerEnded(reason.to_owned()),
        Command::PoolCounts,
        info(format!("NodeClaim terminated ({reason}).")),
        Command::Stop,
    ]
}
