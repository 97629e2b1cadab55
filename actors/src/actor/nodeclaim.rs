//! One actor per NodeClaim, running the pure lifecycle of
//! [`karpenter_core::lifecycle::nodeclaim`]: each message becomes an input, `decide` turns it
//! into commands, and this actor carries them out — journal appends (folded into its view by
//! the same `apply` replay uses), object writes, cloud and cluster calls, timers, messages
//! to the scheduler and the NodePool — feeding each call's result back as the next input.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{debug, info, warn};

use super::Context;
use super::messages::{NodeClaimMsg, NodeClaimStatus, NodePoolMsg, SchedulerMsg};

use karpenter_core::api::NodeClaim;
use karpenter_core::disruption::drift::instance_type_not_found;
use karpenter_core::disruption::observe::ClaimFacts;
use karpenter_core::events::{DomainEvent, NodeClaimPlan, NodeClaimState, NodeClaimView};
use karpenter_core::lifecycle::nodeclaim::{
    Call, Command, DrainReport, Input, Live, Metric, Timing, WriteFailure, decide, start,
};
use karpenter_core::model::{InstanceType, Requirements, Taint};
use karpenter_core::ports::{
    BoxFuture, ClusterError, DriftCheck, EventObject, LaunchRequest, NodeClassHash,
};
use karpenter_core::vocab::labels;

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

/// The NodeClaim actor's state: the lifecycle's and who to tell.
pub struct NodeClaimActorState {
    ctx: Context,
    live: Live,
    scheduler: ActorRef<SchedulerMsg>,
    nodepool: ActorRef<NodePoolMsg>,
    /// Commands decided and not yet carried out.
    queue: VecDeque<Command>,
    /// Inputs the calls returned, decided before anything that arrived meanwhile.
    results: VecDeque<Input>,
    /// Inputs that arrived while a call ran.
    deferred: VecDeque<Input>,
    /// A call is running.
    calling: bool,
    /// The actor has been told to stop.
    stopped: bool,
    /// When the actor started (journal clock, ms): a NodeClaim's age when its instance does
    /// not say when it launched.
    started_ms: i64,
    /// When its drain or termination started, for the termination duration.
    termination_started: TerminationStart,
}

/// When a NodeClaim's drain or termination started, as this process knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TerminationStart {
    /// It has not started.
    NotYet,
    /// At this time (journal clock, ms).
    At(i64),
    /// It was already under way when this process adopted the NodeClaim: not measured.
    BeforeAdoption,
}

/// The NodeClaim actor.
pub struct NodeClaimActor;

impl NodeClaimActorState {
    fn name(&self) -> &str {
        &self.live.name
    }

    fn pool(&self) -> &str {
        &self.live.view.nodepool
    }

    fn timing(&self) -> Timing {
        let settings = &self.ctx.settings;
        Timing {
            launch_timeout: settings.launch_timeout,
            registration_timeout: settings.registration_timeout,
            retry: settings.eviction_retry,
            drift_check: settings.drift_check,
        }
    }

    fn status(&self) -> NodeClaimStatus {
        NodeClaimStatus {
            name: self.name().to_owned(),
            nodepool: self.pool().to_owned(),
            state: self.live.view.state,
            instance: self.live.view.instance.clone(),
            node: self.live.view.node.clone(),
            pods: self.live.view.pods.clone(),
            reason: self.live.view.reason.clone(),
            facts: ClaimFacts::of(&self.live, self.started_ms),
            round: self.live.view.round,
            conditions: self
                .live
                .object
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        }
    }

    /// Carries out what is queued: commands in order, then the inputs calls returned, then
    /// the messages that arrived meanwhile, each input decided into more commands. A call
    /// (cloud, cluster) runs in a task of its own and its result comes back as a message, so
    /// the actor answers `GetStatus` and takes in `Deleted` while it waits; nothing else
    /// runs until the result is in, so the lifecycle sees inputs in the order it would if
    /// every call were instant.
    fn pump(&mut self, myself: &ActorRef<NodeClaimMsg>) -> Result<(), ActorProcessingErr> {
        while !self.calling && !self.stopped {
            if let Some(command) = self.queue.pop_front() {
                self.execute(myself, command)?;
                continue;
            }
            let Some(input) = self
                .results
                .pop_front()
                .or_else(|| self.deferred.pop_front())
            else {
                break;
            };
            let commands = decide(&self.live, input, self.ctx.journal.now_ms(), &self.timing());
            self.queue.extend(commands);
        }
        Ok(())
    }

    /// Starts a call; its result comes back as [`NodeClaimMsg::Called`].
    fn call(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        call: impl std::future::Future<Output = Option<Input>> + Send + 'static,
    ) {
        self.calling = true;
        let myself = myself.clone();
        tokio::spawn(async move {
            let result = call.await;
            // A stopped actor no longer needs it.
            let _ = myself.send_message(NodeClaimMsg::Called(result));
        });
    }

    /// What a call does: a task resolving to the input its result makes.
    fn run(&self, call: Call) -> BoxFuture<'static, Option<Input>> {
        let ctx = self.ctx.clone();
        match call {
            Call::WriteObject => {
                let object = self.live.object.clone();
                Box::pin(async move {
                    let result =
                        ctx.cluster
                            .put_nodeclaim(&object)
                            .await
                            .map_err(|error| WriteFailure {
                                gone: matches!(error, ClusterError::Gone { .. }),
                                message: error.to_string(),
                            });
                    Some(Input::Written(result))
                })
            }
            Call::Launch(request) => Box::pin(async move {
                Some(Input::LaunchResult(
                    ctx.cloud_as("nodeclaim.lifecycle").create(&request).await,
                ))
            }),
            Call::SyncNode(node) => {
                let object = self.live.object.clone();
                Box::pin(async move {
                    let result = ctx.cluster.sync_node(&node, &object).await;
                    Some(Input::NodeSynced(result))
                })
            }
            Call::Cordon(node) => {
                Box::pin(async move { Some(Input::Cordoned(ctx.cluster.cordon(&node).await)) })
            }
            Call::DrainPass { node, expired } => {
                let name = self.name().to_owned();
                Box::pin(async move {
                    Some(Input::DrainPassed(
                        drain_pass(&ctx, &name, &node, expired).await,
                    ))
                })
            }
            Call::DeleteInstance(id) => Box::pin(async move {
                let result = ctx.cloud_as("nodeclaim.termination").delete(&id).await;
                Some(Input::InstanceDeleted(result))
            }),
            Call::DeleteNode(node) => {
                Box::pin(
                    async move { Some(Input::NodeDeleted(ctx.cluster.delete_node(&node).await)) },
                )
            }
            Call::CheckDrift => self.check_drift(),
            Call::MarkNode { node, disrupted } => Box::pin(async move {
                let result = ctx.cluster.taint_disrupted(&node, disrupted).await;
                Some(Input::Marked(result))
            }),
            Call::Release => {
                let name = self.name().to_owned();
                Box::pin(async move {
                    let result = ctx.cluster.release_nodeclaim(&name).await;
                    Some(Input::Released(result))
                })
            }
        }
    }

    /// Asks the cloud whether the instance drifted from its node class, and the catalog
    /// whether its instance type and offering are still there; a failed question changes
    /// nothing (asked again at the next check).
    fn check_drift(&self) -> BoxFuture<'static, Option<Input>> {
        let Some(instance) = self.live.view.instance.clone() else {
            return Box::pin(async { None });
        };
        let annotations = self
            .live
            .object
            .metadata
            .annotations
            .clone()
            .unwrap_or_default();
        let node_class_hash = match (
            annotations.get(labels::EC2NODECLASS_HASH),
            annotations.get(labels::EC2NODECLASS_HASH_VERSION),
        ) {
            (Some(hash), Some(version)) => Some(NodeClassHash {
                hash: hash.clone(),
                version: version.clone(),
            }),
            _ => None,
        };
        let check = DriftCheck {
            nodeclaim: self.name().to_owned(),
            node_class: self.live.launch.node_class.clone(),
            instance,
            node_class_hash,
        };
        let launched_ms = check.instance.launched_at_ms.unwrap_or(self.started_ms);
        let ctx = self.ctx.clone();
        Box::pin(async move {
            let drift = match ctx.cloud_as("nodeclaim.disruption").drift(&check).await {
                Ok(drift) => drift,
                Err(error) => {
                    warn!(nodeclaim = %check.nodeclaim, %error, "Checking drift failed; checking again later.");
                    return None;
                }
            };
            let drift = match drift {
                Some(drift) => Some(drift),
                None => match ctx
                    .cloud_as("nodeclaim.disruption")
                    .instance_types(&check.node_class)
                    .await
                {
                    Ok(catalog) => instance_type_not_found(
                        &check.instance,
                        &catalog,
                        launched_ms,
                        ctx.journal.now_ms(),
                    ),
                    Err(error) => {
                        warn!(nodeclaim = %check.nodeclaim, %error, "Listing instance types for the drift check failed; checking again later.");
                        return None;
                    }
                },
            };
            Some(Input::ProviderDrift(drift.map(|d| (d.reason, d.message))))
        })
    }

    /// One command: a call started, or done at once.
    fn execute(
        &mut self,
        myself: &ActorRef<NodeClaimMsg>,
        command: Command,
    ) -> Result<(), ActorProcessingErr> {
        let ctx = self.ctx.clone();
        match command {
            Command::Record(events) => self.record(&events, false)?,
            Command::RecordDurably(events) => self.record(&events, true)?,
            Command::Update(update) => self.live.update(&update, ctx.now()),
            Command::Call(call) => {
                let task = self.run(call);
                self.call(myself, task);
            }
            Command::MarkUnavailable(offerings) => {
                for offering in &offerings {
                    ctx.cloud.mark_unavailable(offering);
                }
            }
            Command::After(delay, input) => {
                myself.send_after(delay, move || NodeClaimMsg::Input(input));
            }
            Command::Next(input) => myself.send_message(NodeClaimMsg::Input(input))?,
            Command::Emit {
                object,
                reason,
                message,
            } => ctx.cluster.emit_event(&object, &reason, &message),
            Command::SchedulerLaunched(instance) => {
                info!(
                    nodeclaim = %self.name(),
                    nodepool = %instance.nodepool,
                    provider_id = %instance.provider_id,
                    instance_type = %instance.instance_type,
                    zone = %instance.zone,
                    capacity_type = %instance.capacity_type,
                    "Launched."
                );
                let _ = self.scheduler.cast(SchedulerMsg::NodeClaimLaunched {
                    nodeclaim: self.name().to_owned(),
                    instance: Box::new(instance),
                    labels: self.live.object.metadata.labels.clone().unwrap_or_default(),
                });
            }
            Command::SchedulerEnded(reason) => {
                let _ = self.scheduler.cast(SchedulerMsg::NodeClaimEnded {
                    nodeclaim: self.name().to_owned(),
                    reason,
                });
            }
            Command::PoolCounts => self.tell_pool(),
            Command::PoolRegistration(outcome) => {
                let _ = self
                    .nodepool
                    .cast(NodePoolMsg::RegistrationOutcome(outcome));
            }
            Command::Metric(metric) => self.metric(metric),
            Command::Log {
                warn: true,
                message,
            } => {
                warn!(nodeclaim = %self.name(), "{message}");
            }
            Command::Log { message, .. } => info!(nodeclaim = %self.name(), "{message}"),
            Command::Ignore { input, phase } => {
                debug!(nodeclaim = %self.name(), input, ?phase, "Nothing to do for this input in this phase.");
            }
            Command::Stop => {
                self.stopped = true;
                myself.stop(None);
            }
        }
        Ok(())
    }

    /// Appends events (durably: flushed before the next command) and folds them into the
    /// view with the replay's `apply`.
    fn record(&mut self, events: &[DomainEvent], durably: bool) -> Result<(), ActorProcessingErr> {
        if durably {
            self.ctx.record_durably(events)?;
        } else {
            self.ctx.record(events)?;
        }
        for event in events {
            self.live.view.apply(event);
        }
        if self.termination_started == TerminationStart::NotYet
            && matches!(
                self.live.view.state,
                NodeClaimState::Draining | NodeClaimState::Terminating
            )
        {
            self.termination_started = TerminationStart::At(self.ctx.journal.now_ms());
        }
        Ok(())
    }

    fn tell_pool(&self) {
        let _ = self.nodepool.cast(NodePoolMsg::NodeClaimChanged {
            nodeclaim: self.name().to_owned(),
            instance_type: self
                .live
                .view
                .instance
                .as_ref()
                .map(|i| i.instance_type.clone()),
            terminated: self.live.view.state == NodeClaimState::Terminated,
        });
    }

    fn metric(&self, metric: Metric) {
        let metrics = &self.ctx.metrics;
        let pool = self.pool();
        match metric {
            Metric::Created => metrics.nodeclaim_created(pool),
            Metric::LaunchError(label) => metrics.cloudprovider_error("Create", label),
            Metric::Terminated(reason) => {
                metrics.nodeclaim_terminated(pool, &reason);
                let had_node = self.live.view.node.is_some();
                if had_node {
                    metrics.node_terminated(pool);
                }
                let now = self.ctx.journal.now_ms();
                let seconds = |since_ms: i64| (now - since_ms).max(0) as f64 / 1000.0;
                let termination = match self.termination_started {
                    TerminationStart::At(since_ms) => Some(seconds(since_ms)),
                    _ => None,
                };
                let lifetime = self
                    .live
                    .view
                    .instance
                    .as_ref()
                    .and_then(|i| i.launched_at_ms)
                    .map(seconds);
                metrics.nodeclaim_ended(pool, termination, had_node, lifetime);
            }
            Metric::NodeCreated => metrics.node_created(pool),
            Metric::Disrupted(reason) => {
                let capacity_type = self
                    .live
                    .view
                    .instance
                    .as_ref()
                    .map_or("", |i| i.capacity_type.as_str());
                metrics.nodeclaim_disrupted(pool, &reason, capacity_type);
            }
        }
    }
}

/// One drain pass on `node`: evicts what may be evicted now (each pod's Event says how
/// it went), or, once the terminationGracePeriod has passed, evicts nothing and tells
/// each pod it goes with its node; then looks again, and at the node's volumes once no
/// pod is left.
async fn drain_pass(ctx: &Context, name: &str, node: &str, expired: bool) -> DrainReport {
    let cluster = ctx.cluster.clone();
    let pods = cluster.pods_to_drain(node).await;
    let pod_object = |namespace: &str, name: &str| EventObject::Pod {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    if expired {
        for pod in &pods {
            cluster.emit_event(
                &pod_object(&pod.namespace, &pod.name),
                "TerminationGracePeriodExpiring",
                &format!("NodeClaim {}'s terminationGracePeriod elapsed; the pod goes with its node {node}", name),
            );
        }
    } else {
        for pod in pods.iter().filter(|p| !p.wait) {
            let object = pod_object(&pod.namespace, &pod.name);
            match cluster.evict(&pod.uid).await {
                Ok(()) => cluster.emit_event(
                    &object,
                    "Evicted",
                    &format!("Evicted pod: draining node {node}"),
                ),
                Err(error) => cluster.emit_event(&object, "DisruptionBlocked", &error.to_string()),
            }
        }
    }
    // Evicted pods take their grace period to go: drained only once none is left.
    let pods_gone = expired || pods.is_empty() || cluster.pods_to_drain(node).await.is_empty();
    let attached_volumes = if pods_gone && !expired {
        cluster.volumes_attached(node).await
    } else {
        0
    };
    DrainReport {
        pods_gone,
        attached_volumes,
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
        let launch = LaunchRequest {
            nodeclaim: args.plan.nodeclaim.clone(),
            nodepool: args.plan.nodepool.clone(),
            client_token: client_token.clone(),
            node_class: args.node_class,
            requirements: args.requirements,
            labels: args.labels,
            taints: args.taints,
            instance_types: args.plan.instance_types.clone(),
            overlaid: (args.instance_types.iter())
                .any(|t| t.offerings.iter().any(|o| o.overlay.is_some())),
        };
        let mut view = NodeClaimView::planned(&args.plan);
        let adopted = args.resume.is_some();
        if let Some(adopt) = &args.resume {
            view.state = adopt.state;
            view.instance = Some(adopt.instance.clone());
            view.node = adopt.node.clone();
            view.client_token = Some(client_token);
        }
        let mut state = NodeClaimActorState {
            live: Live {
                name: args.plan.nodeclaim.clone(),
                view,
                object: args.object,
                launch,
                instance_types: args.instance_types,
                object_exists: adopted,
                // Nothing retries writes until the first write has been tried.
                write_retry_pending: true,
                launch_attempts: 0,
                cordoned: false,
                awaiting_volumes: false,
                drain_since_ms: None,
                disruption: None,
                pool_drift: None,
                provider_drift: None,
            },
            ctx: args.ctx,
            scheduler: args.scheduler,
            nodepool: args.nodepool,
            queue: VecDeque::new(),
            results: VecDeque::new(),
            deferred: VecDeque::new(),
            calling: false,
            stopped: false,
            started_ms: 0,
            termination_started: TerminationStart::NotYet,
        };
        if matches!(
            state.live.view.state,
            NodeClaimState::Draining | NodeClaimState::Terminating
        ) {
            state.termination_started = TerminationStart::BeforeAdoption;
        }
        state.started_ms = state.ctx.journal.now_ms();
        let commands = match &args.resume {
            Some(adopt) => {
                info!(nodeclaim = %adopt.nodeclaim, instance.id = %adopt.instance.id, state = ?adopt.state, "Adopted after restart.");
                karpenter_core::lifecycle::nodeclaim::adopted(
                    adopt,
                    &state.timing(),
                    state.started_ms,
                )
            }
            None => start(&state.live, &state.timing()),
        };
        state.queue.extend(commands);
        state.pump(&myself)?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            NodeClaimMsg::Input(input) => {
                state.deferred.push_back(input);
                state.pump(&myself)?;
            }
            NodeClaimMsg::Called(result) => {
                state.calling = false;
                state.results.extend(result);
                state.pump(&myself)?;
            }
            NodeClaimMsg::GetStatus(reply) => {
                let _ = reply.send(state.status());
            }
        }
        Ok(())
    }
}
