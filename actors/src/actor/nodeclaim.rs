//! One actor per NodeClaim: Pending → Launched → Registered → Initialized → Draining →
//! Terminating → Terminated.

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};

use super::Context;
use super::messages::*;

use karpenter_core::api::NodeClaim;
use karpenter_core::api::nodeclaim::condition;
use karpenter_core::events::{DomainEvent, NodeClaimPlan, NodeClaimState};
use karpenter_core::model::{InstanceType, Requirements, Taint};
use karpenter_core::ports::{CloudError, ClusterError, EventObject, Instance, LaunchRequest};

/// What a NodeClaim actor starts from.
pub struct NodeClaimArgs {
    /// Shared context.
    pub ctx: Context,
    /// The round's plan.
    pub plan: NodeClaimPlan,
    /// Narrowed requirements.
    pub requirements: Requirements,
    /// Taints its node gets.
    pub taints: Vec<Taint>,
    /// Labels its node gets (template labels).
    pub labels: BTreeMap<String, String>,
    /// The node class (EC2NodeClass) of its NodePool.
    pub node_class: String,
    /// Its API object as planned ([`NodeClaim::planned`]); the actor keeps its status.
    pub object: NodeClaim,
    /// The instance types it may launch as, for the capacity it reports once launched.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// The scheduler, told about launches and failures.
    pub scheduler: ActorRef<SchedulerMsg>,
    /// The owning NodePool actor.
    pub nodepool: ActorRef<NodePoolMsg>,
    /// Resume an adopted NodeClaim (after a restart) instead of launching.
    pub resume: Option<karpenter_core::recovery::Adopt>,
}

/// The NodeClaim actor's state.
pub struct NodeClaimActorState {
    args: NodeClaimArgs,
    state: NodeClaimState,
    instance: Option<Instance>,
    node: Option<String>,
    client_token: String,
    drain_reason: Option<String>,
    launch_attempts: u32,
    /// A failed object write is waiting to be retried.
    write_retry_pending: bool,
    /// The object has been written at least once (it exists, holding the finalizer).
    object_exists: bool,
    /// When draining started, for the terminationGracePeriod.
    drain_started: Option<tokio::time::Instant>,
    /// The wait for volumes to detach has been reported (once).
    awaiting_volumes: bool,
    /// The node has been cordoned for the drain.
    cordoned: bool,
}

/// The NodeClaim actor.
pub struct NodeClaimActor;

impl NodeClaimActorState {
    fn name(&self) -> &str {
        &self.args.plan.nodeclaim
    }

    fn status(&self) -> NodeClaimStatus {
        NodeClaimStatus {
            name: self.name().to_owned(),
            nodepool: self.args.plan.nodepool.clone(),
            state: self.state,
            instance: self.instance.clone(),
            node: self.node.clone(),
            pods: self.args.plan.pods.clone(),
        }
    }

    /// Writes the NodeClaim object; a failure is retried until a write succeeds (each write
    /// carries the whole current object, so later transitions need no replay).
    async fn write_object(&mut self, myself: &ActorRef<NodeClaimMsg>) -> Result<(), ClusterError> {
        match self.args.ctx.cluster.put_nodeclaim(&self.args.object).await {
            Ok(()) => {
                self.object_exists = true;
                Ok(())
            }
            Err(error @ ClusterError::Gone { .. }) => Err(error),
            Err(error) => {
                warn!(nodeclaim = %self.name(), %error, "Writing the NodeClaim object failed; retrying.");
                if !self.write_retry_pending {
                    self.write_retry_pending = true;
                    myself.send_after(self.args.ctx.settings.eviction_retry, || {
                        NodeClaimMsg::WriteObject
                    });
                }
                Err(error)
            }
        }
    }

    fn set_condition(&mut self, type_: &str, status: bool, reason: &str, message: &str) {
        let now = self.args.ctx.now();
        self.args
            .object
            .set_condition(type_, status, reason, message, now);
    }

    /// Starts draining (cordon, then evictions) for `reason`, unless already draining.
    async fn start_draining(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        reason: String,
    ) -> Result<(), ActorProcessingErr> {
        if self.state >= NodeClaimState::Draining {
            return Ok(());
        }
        self.args.ctx.record(&[DomainEvent::NodeClaimDraining {
            nodeclaim: self.name().to_owned(),
            reason: reason.clone(),
        }])?;
        self.state = NodeClaimState::Draining;
        self.drain_reason = Some(reason);
        self.drain_started = Some(tokio::time::Instant::now());
        self.set_condition(condition::DRAINED, false, "Draining", "Draining the node");
        let _ = self.write_object(myself).await;
        // The first drain pass cordons the node before it evicts anything.
        myself.send_message(NodeClaimMsg::Drain)?;
        Ok(())
    }

    /// Cordons the node unless done already: evicting from a node that still takes pods
    /// would let them come straight back. A failure is reported (a `FailedDraining` Event)
    /// and the drain pass retried.
    async fn cordoned(&mut self, node: &str) -> bool {
        if self.cordoned {
            return true;
        }
        match self.args.ctx.cluster.cordon(node).await {
            Ok(()) => {
                self.cordoned = true;
                true
            }
            Err(error) => {
                warn!(nodeclaim = %self.name(), node, %error, "Cordoning the node failed; retrying before evicting anything.");
                self.args.ctx.cluster.emit_event(
                    &EventObject::NodeClaim(self.name().to_owned()),
                    "FailedDraining",
                    &format!("Cordoning node {node} failed: {error}"),
                );
                false
            }
        }
    }

    fn notify_pool(&self) {
        let _ = self.args.nodepool.cast(NodePoolMsg::NodeClaimChanged {
            nodeclaim: self.name().to_owned(),
            instance_type: self.instance.as_ref().map(|i| i.instance_type.clone()),
            terminated: self.state == NodeClaimState::Terminated,
        });
    }

    /// Ends the NodeClaim: records it, hands its not-yet-bound pods back to the scheduler and
    /// stops the actor.
    fn finish(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        reason: &str,
    ) -> Result<(), ActorProcessingErr> {
        self.state = NodeClaimState::Terminated;
        self.args
            .ctx
            .metrics
            .nodeclaim_terminated(&self.args.plan.nodepool, reason);
        if let Some(node) = &self.node {
            self.args
                .ctx
                .metrics
                .set_node_allocatable(node, &self.args.plan.nodepool, None);
        }
        self.args.ctx.record(&[DomainEvent::NodeClaimTerminated {
            nodeclaim: self.name().to_owned(),
            reason: reason.to_owned(),
        }])?;
        let _ = self.args.scheduler.cast(SchedulerMsg::NodeClaimEnded {
            nodeclaim: self.name().to_owned(),
            reason: reason.to_owned(),
        });
        self.notify_pool();
        info!(nodeclaim = %self.name(), reason, "NodeClaim terminated.");
        myself.stop(None);
        Ok(())
    }

    /// Lets the NodeClaim object go, then ends; retried while the API server refuses, so the
    /// object is never left holding a finalizer for an instance that is gone.
    async fn release(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        reason: &str,
    ) -> Result<(), ActorProcessingErr> {
        if let Err(error) = self.args.ctx.cluster.release_nodeclaim(self.name()).await {
            warn!(nodeclaim = %self.name(), %error, "Releasing the NodeClaim object failed; retrying.");
            // Terminating: the retry (a drain of nothing) ends in another release, whatever
            // state the claim failed in.
            self.state = NodeClaimState::Terminating;
            self.drain_reason = Some(reason.to_owned());
            myself.send_after(self.args.ctx.settings.eviction_retry, || {
                NodeClaimMsg::Drain
            });
            return Ok(());
        }
        self.finish(myself, reason)
    }

    async fn terminate(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        reason: &str,
    ) -> Result<(), ActorProcessingErr> {
        if self.state != NodeClaimState::Terminating {
            self.state = NodeClaimState::Terminating;
            self.set_condition(
                condition::INSTANCE_TERMINATING,
                true,
                "InstanceTerminating",
                "Terminating the instance",
            );
            let _ = self.write_object(myself).await;
        }
        if let Some(instance) = &self.instance
            && let Err(error) = self.args.ctx.cloud.delete(&instance.id).await
        {
            // Retry: an instance must never be left running without its NodeClaim.
            warn!(nodeclaim = %self.name(), %error, "Terminating the instance failed; retrying.");
            myself.send_after(self.args.ctx.settings.eviction_retry, || {
                NodeClaimMsg::Drain
            });
            return Ok(());
        }
        if let Some(node) = &self.node {
            self.args.ctx.cluster.delete_node(node).await;
        }
        self.release(myself, reason).await
    }
}

impl Actor for NodeClaimActor {
    type Msg = NodeClaimMsg;
    type State = NodeClaimActorState;
    type Arguments = NodeClaimArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: NodeClaimArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let client_token = format!("{}-r{}", args.plan.nodeclaim, args.plan.round);
        if let Some(adopt) = args.resume.clone() {
            info!(nodeclaim = %adopt.nodeclaim, instance.id = %adopt.instance.id, state = ?adopt.state, "Adopted after restart.");
            if adopt.state == NodeClaimState::Launched {
                myself.send_after(args.ctx.settings.registration_timeout, || {
                    NodeClaimMsg::RegistrationDeadline
                });
            }
            let _ = args.scheduler.cast(SchedulerMsg::NodeClaimLaunched {
                nodeclaim: adopt.nodeclaim.clone(),
                instance: Box::new(adopt.instance.clone()),
            });
            let mut args = args;
            let instance_type = args
                .instance_types
                .iter()
                .find(|t| t.name == adopt.instance.instance_type)
                .cloned();
            let now = args.ctx.now();
            args.object
                .launched(&adopt.instance, instance_type.as_deref(), now.clone());
            if let Some(node) = &adopt.node {
                args.object
                    .status
                    .get_or_insert_with(Default::default)
                    .node_name = Some(node.clone());
                args.object.set_condition(
                    condition::REGISTERED,
                    true,
                    condition::REGISTERED,
                    "",
                    now.clone(),
                );
            }
            if adopt.state >= NodeClaimState::Initialized {
                args.object.set_condition(
                    condition::INITIALIZED,
                    true,
                    condition::INITIALIZED,
                    "",
                    now,
                );
            }
            myself.send_message(NodeClaimMsg::WriteObject)?;
            let state = NodeClaimActorState {
                state: adopt.state,
                instance: Some(adopt.instance),
                node: adopt.node,
                client_token,
                drain_reason: None,
                launch_attempts: 0,
                write_retry_pending: true,
                object_exists: true,
                drain_started: None,
                awaiting_volumes: false,
                cordoned: false,
                args,
            };
            state.notify_pool();
            return Ok(state);
        }
        // Write-ahead: on disk before the cloud is called, so a restart knows a launch may exist.
        args.ctx.metrics.nodeclaim_created(&args.plan.nodepool);
        args.ctx.record_durably(&[DomainEvent::LaunchRequested {
            nodeclaim: args.plan.nodeclaim.clone(),
            client_token: client_token.clone(),
        }])?;
        // The object first, so it exists (with its finalizer) before any instance does: the
        // launch follows its first successful write.
        myself.send_message(NodeClaimMsg::WriteObject)?;
        myself.send_after(args.ctx.settings.launch_timeout, || {
            NodeClaimMsg::LaunchDeadline
        });
        Ok(NodeClaimActorState {
            args,
            state: NodeClaimState::Pending,
            instance: None,
            node: None,
            client_token,
            drain_reason: None,
            launch_attempts: 0,
            write_retry_pending: true,
            object_exists: false,
            drain_started: None,
            awaiting_volumes: false,
            cordoned: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            NodeClaimMsg::Launch if state.state == NodeClaimState::Pending => {
                state.launch_attempts += 1;
                let request = LaunchRequest {
                    nodeclaim: state.name().to_owned(),
                    nodepool: state.args.plan.nodepool.clone(),
                    client_token: state.client_token.clone(),
                    node_class: state.args.node_class.clone(),
                    requirements: state.args.requirements.clone(),
                    labels: state.args.labels.clone(),
                    taints: state.args.taints.clone(),
                    instance_types: state.args.plan.instance_types.clone(),
                };
                match state.args.ctx.cloud.create(&request).await {
                    Ok(instance) => {
                        state.args.ctx.record(&[DomainEvent::NodeClaimLaunched {
                            nodeclaim: state.name().to_owned(),
                            instance: Box::new(instance.clone()),
                        }])?;
                        info!(nodeclaim = %state.name(), instance.id = %instance.id, instance.type = %instance.instance_type, zone = %instance.zone, capacity_type = %instance.capacity_type, "Launched.");
                        state.state = NodeClaimState::Launched;
                        let _ = state.args.scheduler.cast(SchedulerMsg::NodeClaimLaunched {
                            nodeclaim: state.name().to_owned(),
                            instance: Box::new(instance.clone()),
                        });
                        let instance_type = state
                            .args
                            .instance_types
                            .iter()
                            .find(|t| t.name == instance.instance_type)
                            .cloned();
                        let now = state.args.ctx.now();
                        state
                            .args
                            .object
                            .launched(&instance, instance_type.as_deref(), now);
                        state.instance = Some(instance);
                        let _ = state.write_object(&myself).await;
                        state.notify_pool();
                        myself.send_after(state.args.ctx.settings.registration_timeout, || {
                            NodeClaimMsg::RegistrationDeadline
                        });
                    }
                    Err(CloudError::InsufficientCapacity { offerings }) => {
                        state
                            .args
                            .ctx
                            .metrics
                            .cloudprovider_error("Create", "insufficient_capacity");
                        for offering in &offerings {
                            state.args.ctx.cloud.mark_unavailable(offering);
                        }
                        let reason =
                            format!("insufficient capacity for {} offering(s)", offerings.len());
                        state.args.ctx.record(&[DomainEvent::LaunchFailed {
                            nodeclaim: state.name().to_owned(),
                            reason: reason.clone(),
                            unavailable: offerings,
                        }])?;
                        state.args.ctx.cluster.emit_event(
                            &EventObject::NodeClaim(state.name().to_owned()),
                            "InsufficientCapacityError",
                            &reason,
                        );
                        state.release(&myself, "insufficient_capacity").await?;
                    }
                    Err(error) => {
                        state
                            .args
                            .ctx
                            .metrics
                            .cloudprovider_error("Create", error.metric_label());
                        state.args.ctx.record(&[DomainEvent::LaunchFailed {
                            nodeclaim: state.name().to_owned(),
                            reason: error.to_string(),
                            unavailable: Vec::new(),
                        }])?;
                        if let CloudError::NodeClassNotReady { name, reason } = &error {
                            // Credentials, permissions or unresolvable selectors: say so where
                            // people look, instead of only retrying.
                            state.args.ctx.cluster.emit_event(
                                &EventObject::NodeClaim(state.name().to_owned()),
                                "NodeClassNotReady",
                                &format!("EC2NodeClass {name} is not ready: {reason}"),
                            );
                        }
                        let backoff =
                            std::time::Duration::from_secs(1 << state.launch_attempts.min(6));
                        warn!(nodeclaim = %state.name(), %error, ?backoff, "Launch failed; retrying.");
                        myself.send_after(backoff, || NodeClaimMsg::Launch);
                    }
                }
            }
            NodeClaimMsg::Launch => {}
            NodeClaimMsg::LaunchDeadline if state.state == NodeClaimState::Pending => {
                state.args.ctx.record(&[DomainEvent::LaunchFailed {
                    nodeclaim: state.name().to_owned(),
                    reason: "launch timeout".into(),
                    unavailable: Vec::new(),
                }])?;
                let _ = state
                    .args
                    .nodepool
                    .cast(NodePoolMsg::RegistrationOutcome(Some(
                        "launch_timeout".into(),
                    )));
                state.release(&myself, "launch_timeout").await?;
            }
            NodeClaimMsg::LaunchDeadline => {}
            NodeClaimMsg::NodeRegistered { node } if state.state == NodeClaimState::Launched => {
                state.args.ctx.record(&[DomainEvent::NodeClaimRegistered {
                    nodeclaim: state.name().to_owned(),
                    node: node.clone(),
                }])?;
                state
                    .args
                    .object
                    .status
                    .get_or_insert_with(Default::default)
                    .node_name = Some(node.clone());
                state.set_condition(condition::REGISTERED, true, condition::REGISTERED, "");
                state
                    .args
                    .ctx
                    .cluster
                    .sync_node(&node, &state.args.object)
                    .await;
                let _ = state.write_object(&myself).await;
                let allocatable = state
                    .args
                    .ctx
                    .cluster
                    .nodes()
                    .await
                    .into_iter()
                    .find(|n| n.name == node)
                    .map(|n| n.allocatable);
                state.args.ctx.metrics.set_node_allocatable(
                    &node,
                    &state.args.plan.nodepool,
                    allocatable.as_ref(),
                );
                state.state = NodeClaimState::Registered;
                state.node = Some(node);
                let _ = state
                    .args
                    .nodepool
                    .cast(NodePoolMsg::RegistrationOutcome(None));
            }
            NodeClaimMsg::NodeRegistered { .. } => {}
            NodeClaimMsg::NodeReady if state.state == NodeClaimState::Registered => {
                state.args.ctx.record(&[DomainEvent::NodeClaimInitialized {
                    nodeclaim: state.name().to_owned(),
                }])?;
                state.state = NodeClaimState::Initialized;
                state.set_condition(condition::INITIALIZED, true, condition::INITIALIZED, "");
                let _ = state.write_object(&myself).await;
            }
            NodeClaimMsg::NodeReady => {}
            NodeClaimMsg::RegistrationDeadline if state.state == NodeClaimState::Launched => {
                warn!(nodeclaim = %state.name(), "Node did not register in time; terminating.");
                let _ = state
                    .args
                    .nodepool
                    .cast(NodePoolMsg::RegistrationOutcome(Some(
                        "registration_timeout".into(),
                    )));
                state.terminate(&myself, "registration_timeout").await?;
            }
            NodeClaimMsg::RegistrationDeadline => {}
            NodeClaimMsg::Interrupted { kind }
                if state.state < NodeClaimState::Draining && state.instance.is_some() =>
            {
                let instance_id = state
                    .instance
                    .as_ref()
                    .map(|i| i.id.clone())
                    .unwrap_or_default();
                let object = match &state.node {
                    Some(node) => EventObject::Node(node.clone()),
                    None => EventObject::NodeClaim(state.name().to_owned()),
                };
                if !kind.disrupts() {
                    state.args.ctx.record(&[DomainEvent::InterruptionReceived {
                        nodeclaim: state.name().to_owned(),
                        instance_id: instance_id.clone(),
                        kind,
                    }])?;
                    state.args.ctx.cluster.emit_event(
                        &object,
                        kind.event_reason(),
                        &format!("Instance {instance_id} received {}", kind.as_str()),
                    );
                    return Ok(());
                }
                let reason = kind.as_str().to_owned();
                state.args.ctx.cluster.emit_event(
                    &object,
                    kind.event_reason(),
                    &format!("Instance {instance_id} received {reason}; cordoning and draining"),
                );
                state.args.ctx.record(&[DomainEvent::InterruptionReceived {
                    nodeclaim: state.name().to_owned(),
                    instance_id,
                    kind,
                }])?;
                state.start_draining(&myself, reason).await?;
            }
            NodeClaimMsg::Interrupted { .. } => {}
            NodeClaimMsg::Deleted { since_ms } if state.state < NodeClaimState::Draining => {
                info!(nodeclaim = %state.name(), "NodeClaim deleted; draining before termination.");
                if state.instance.is_none() {
                    // Nothing launched yet: no node to drain. A launch still in flight ends
                    // at its deadline or, once it returns, through the garbage collector.
                    state.release(&myself, "deleted").await?;
                } else {
                    state.start_draining(&myself, "deleted".to_owned()).await?;
                    if let Some(since_ms) = since_ms {
                        let ago = state.args.ctx.journal.now_ms().saturating_sub(since_ms);
                        let ago = std::time::Duration::from_millis(ago.max(0) as u64);
                        if let Some(at) = tokio::time::Instant::now().checked_sub(ago) {
                            state.drain_started = Some(at);
                        }
                    }
                }
            }
            NodeClaimMsg::Deleted { .. } => {}
            NodeClaimMsg::NodePoolChanged(pool) if state.state < NodeClaimState::Draining => {
                let changed = match karpenter_core::api::nodeclaim::drift(&state.args.object, &pool)
                {
                    Some((reason, message)) => {
                        let current = state.args.object.status.as_ref().and_then(|s| {
                            s.conditions.iter().find(|c| c.type_ == condition::DRIFTED)
                        });
                        let same =
                            current.is_some_and(|c| c.reason == reason && c.message == message);
                        if !same {
                            info!(nodeclaim = %state.name(), reason, %message, "NodeClaim drifted.");
                            state.set_condition(condition::DRIFTED, true, reason, &message);
                        }
                        !same
                    }
                    None => state.args.object.remove_condition(condition::DRIFTED),
                };
                if changed && state.object_exists {
                    let _ = state.write_object(&myself).await;
                }
            }
            NodeClaimMsg::NodePoolChanged(_) => {}
            NodeClaimMsg::WriteObject => {
                state.write_retry_pending = false;
                let first = !state.object_exists;
                match state.write_object(&myself).await {
                    Ok(()) if first && state.state == NodeClaimState::Pending => {
                        myself.send_message(NodeClaimMsg::Launch)?;
                    }
                    Err(ClusterError::Gone { message, .. }) if first => {
                        warn!(nodeclaim = %state.name(), %message, "Not launching: its NodePool is gone.");
                        state.args.ctx.record(&[DomainEvent::LaunchFailed {
                            nodeclaim: state.name().to_owned(),
                            reason: message,
                            unavailable: Vec::new(),
                        }])?;
                        state.finish(&myself, "nodepool_deleted")?;
                    }
                    _ => {}
                }
            }
            NodeClaimMsg::Drain
                if matches!(
                    state.state,
                    NodeClaimState::Draining | NodeClaimState::Terminating
                ) =>
            {
                let reason = state
                    .drain_reason
                    .clone()
                    .unwrap_or_else(|| "interrupted".into());
                // The terminationGracePeriod bounds every wait: once it has passed, whatever
                // is left goes with the node.
                let expired = match (
                    &state.args.object.spec.termination_grace_period,
                    state.drain_started,
                ) {
                    (Some(grace), Some(started)) => started.elapsed() >= grace.0,
                    _ => false,
                };
                let mut drained = true;
                if let Some(node) = state.node.clone() {
                    if !expired && !state.cordoned(&node).await {
                        myself.send_after(state.args.ctx.settings.eviction_retry, || {
                            NodeClaimMsg::Drain
                        });
                        return Ok(());
                    }
                    let cluster = state.args.ctx.cluster.clone();
                    let pods = cluster.pods_to_drain(&node).await;
                    if expired && !pods.is_empty() {
                        for pod in &pods {
                            cluster.emit_event(
                                &EventObject::Pod {
                                    namespace: pod.namespace.clone(),
                                    name: pod.name.clone(),
                                },
                                "TerminationGracePeriodExpiring",
                                &format!("NodeClaim {}'s terminationGracePeriod elapsed; the pod goes with its node {node}", state.name()),
                            );
                        }
                    }
                    for pod in pods.iter().filter(|p| !p.wait && !expired) {
                        let object = EventObject::Pod {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                        };
                        match cluster.evict(&pod.uid).await {
                            Ok(()) => cluster.emit_event(
                                &object,
                                "Evicted",
                                &format!("Evicted pod: draining node {node}"),
                            ),
                            Err(error) => {
                                cluster.emit_event(&object, "DisruptionBlocked", &error.to_string())
                            }
                        }
                    }
                    // Evicted pods take their grace period to go: drained only once none
                    // is left to deal with.
                    drained =
                        expired || pods.is_empty() || cluster.pods_to_drain(&node).await.is_empty();
                    if drained && !expired {
                        let attached = cluster.volumes_attached(&node).await;
                        if attached > 0 {
                            drained = false;
                            if !state.awaiting_volumes {
                                state.awaiting_volumes = true;
                                cluster.emit_event(
                                    &EventObject::NodeClaim(state.name().to_owned()),
                                    "AwaitingVolumeDetachment",
                                    &format!("Awaiting deletion of {attached} VolumeAttachment(s) bound to node {node}"),
                                );
                            }
                        }
                    }
                }
                if drained {
                    if state.state == NodeClaimState::Draining {
                        state.set_condition(condition::DRAINED, true, condition::DRAINED, "");
                    }
                    state.terminate(&myself, &reason).await?;
                } else {
                    myself.send_after(state.args.ctx.settings.eviction_retry, || {
                        NodeClaimMsg::Drain
                    });
                }
            }
            NodeClaimMsg::Drain => {}
            NodeClaimMsg::NodeGone { reason } if state.state != NodeClaimState::Terminated => {
                warn!(nodeclaim = %state.name(), %reason, "Node or instance gone; finalizing.");
                // Deleting the instance and the Node again is harmless: both treat "not found" as done.
                state.terminate(&myself, &reason).await?;
            }
            NodeClaimMsg::NodeGone { .. } => {}
            NodeClaimMsg::GetStatus(reply) => {
                let _ = reply.send(state.status());
            }
        }
        Ok(())
    }
}
