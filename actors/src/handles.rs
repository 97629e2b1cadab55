//! Typed handles: how the adapters (the simulator, the Kubernetes controller, the admin
//! endpoint) start a system of actors and talk to it. Nothing outside this crate names ractor,
//! a message enum or the registry; a handle says what can be asked of its actor, and a
//! question that is not answered comes back as an [`ActorError`].

use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;

use crate::actor::Context;
use crate::actor::messages::{
    DisruptionMsg, DisruptionStart, DisruptionStatus, GcSettings, InterruptionMsg,
    InterruptionStatus, KeeperMsg, KeeperStatus, NodeClaimMsg, NodeClaimStatus, NodePoolMsg,
    NodePoolStatus, SchedulerMsg, SchedulerStatus, SupervisorMsg,
};
use crate::actor::supervisor::{SupervisorActor, SupervisorArgs};
use karpenter_core::api::NodePool;
use karpenter_core::events::NodeClaimPlan;
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::model::Pod;
use karpenter_core::ports::InterruptionKind;
use karpenter_core::recovery::Adopt;

/// How long a question to an actor may take before it counts as unanswered.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(crate::actor::ASK_MS);
/// Adoption waits for the NodeClaim actor to start.
const ADOPT_TIMEOUT: Duration = Duration::from_secs(30);

/// An actor could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    /// It has stopped (or never ran).
    #[error("the {0} actor is not running")]
    Gone(String),
    /// It did not answer in time.
    #[error("the {actor} actor did not answer within {timeout:?}")]
    Timeout {
        /// Which actor.
        actor: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// The actors could not be started.
    #[error("cannot start the actors: {0}")]
    Start(String),
}

/// Sends without waiting; a stopped actor is [`ActorError::Gone`].
fn tell<M: ractor::Message>(actor: &ActorRef<M>, who: &str, message: M) -> Result<(), ActorError> {
    actor
        .cast(message)
        .map_err(|_| ActorError::Gone(who.to_owned()))
}

/// Asks and waits up to `timeout` for the reply.
async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    who: &str,
    message: impl FnOnce(RpcReplyPort<T>) -> M,
    timeout: Duration,
) -> Result<T, ActorError> {
    match actor.call(message, Some(timeout)).await {
        Ok(CallResult::Success(value)) => Ok(value),
        Ok(CallResult::Timeout) => Err(ActorError::Timeout {
            actor: who.to_owned(),
            timeout,
        }),
        Ok(CallResult::SenderError) | Err(_) => Err(ActorError::Gone(who.to_owned())),
    }
}

/// A running system: the supervisor and the actors it started.
#[derive(Clone)]
pub struct System {
    ctx: Context,
    supervisor: ActorRef<SupervisorMsg>,
    scheduler: SchedulerHandle,
    interruption: InterruptionHandle,
    task: std::sync::Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("System")
            .field("scope", &self.ctx.scope)
            .finish_non_exhaustive()
    }
}

impl System {
    /// Starts the supervisor, which starts the scheduler, the NodePool actors, the
    /// interruption actor and (if asked) the garbage collector.
    pub async fn start(args: SupervisorArgs) -> Result<System, ActorError> {
        let ctx = args.ctx.clone();
        let (supervisor, task) =
            Actor::spawn(Some(ctx.actor_name("supervisor")), SupervisorActor, args)
                .await
                .map_err(|e| ActorError::Start(e.to_string()))?;
        let actors = ask(
            &supervisor,
            "supervisor",
            SupervisorMsg::GetActors,
            CALL_TIMEOUT,
        )
        .await?;
        Ok(System {
            ctx,
            supervisor,
            scheduler: SchedulerHandle(actors.scheduler),
            interruption: InterruptionHandle(actors.interruption),
            task: std::sync::Arc::new(std::sync::Mutex::new(Some(task))),
        })
    }

    /// The shared context (journal, ports, settings, metrics).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &SchedulerHandle {
        &self.scheduler
    }

    /// The interruption actor.
    pub fn interruption(&self) -> &InterruptionHandle {
        &self.interruption
    }

    /// The NodeClaim actor of `name`, if it runs.
    pub fn nodeclaim(&self, name: &str) -> Option<NodeClaimHandle> {
        self.ctx.nodeclaim_actor(name).map(NodeClaimHandle)
    }

    /// Every running NodeClaim actor, by name, sorted.
    pub fn nodeclaims(&self) -> Vec<(String, NodeClaimHandle)> {
        self.ctx
            .nodeclaim_actors()
            .into_iter()
            .map(|(n, a)| (n, NodeClaimHandle(a)))
            .collect()
    }

    /// The NodePool actor of `name`, if it runs.
    pub fn nodepool(&self, name: &str) -> Option<NodePoolHandle> {
        self.ctx.nodepool_actor(name).map(NodePoolHandle)
    }

    /// Every running NodePool actor, by name, sorted.
    pub fn nodepools(&self) -> Vec<(String, NodePoolHandle)> {
        self.ctx
            .nodepool_actors()
            .into_iter()
            .map(|(n, a)| (n, NodePoolHandle(a)))
            .collect()
    }

    /// Every actor of the system by name (`scheduler`, `nodeclaim/<name>`, …), sorted.
    pub fn actor_names(&self) -> Vec<String> {
        self.ctx.actor_names()
    }

    /// A NodePool was created or changed: its actor takes the new template, or starts.
    pub fn apply_nodepool(&self, pool: NodePool) -> Result<(), ActorError> {
        tell(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::ApplyNodePool(Box::new(pool)),
        )
    }

    /// A NodePool was deleted or became invalid: nothing more is planned for it.
    pub fn remove_nodepool(&self, name: String) -> Result<(), ActorError> {
        tell(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::RemoveNodePool(name),
        )
    }

    /// Runs an actor for an invalid NodePool so its existing NodeClaims can be adopted and
    /// drained; returns it once it runs.
    pub async fn host_nodepool(&self, pool: NodePool) -> Result<NodePoolHandle, ActorError> {
        let name = pool.metadata.name.clone().unwrap_or_default();
        ask(
            &self.supervisor,
            "supervisor",
            |reply| SupervisorMsg::HostNodePool(Box::new(pool), reply),
            ADOPT_TIMEOUT,
        )
        .await?;
        self.nodepool(&name)
            .ok_or_else(|| ActorError::Gone(format!("nodepool/{name}")))
    }

    /// Starts the garbage collector (if it is not running).
    pub fn start_gc(&self, settings: GcSettings) -> Result<(), ActorError> {
        tell(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::StartGc(settings),
        )
    }

    /// Starts the disruption controller (if it is not running), with the commands a
    /// previous run left unfinished.
    pub fn start_disruption(&self, start: DisruptionStart) -> Result<(), ActorError> {
        tell(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::StartDisruption(start),
        )
    }

    /// The disruption controller's state, once it runs (`None` before).
    pub async fn disruption(&self) -> Result<Option<DisruptionStatus>, ActorError> {
        match self.actors().await?.disruption {
            Some(actor) => ask(&actor, "disruption", DisruptionMsg::GetStatus, CALL_TIMEOUT)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// The journal keeper's totals: snapshots, checkpoints, history trimmed, instance-type
    /// sets carried past a cut, failed passes.
    pub async fn keeper(&self) -> Result<KeeperStatus, ActorError> {
        let keeper = self.actors().await?.keeper;
        ask(&keeper, "keeper", KeeperMsg::GetStatus, CALL_TIMEOUT).await
    }

    /// The journal shipper's totals; `None` when the journal is not shipped.
    pub async fn shipper(
        &self,
    ) -> Result<Option<crate::actor::shipper::ShipperStatus>, ActorError> {
        match self.actors().await?.shipper {
            Some(shipper) => Ok(Some(
                ask(
                    &shipper,
                    "shipper",
                    crate::actor::shipper::ShipperMsg::GetStatus,
                    CALL_TIMEOUT,
                )
                .await?,
            )),
            None => Ok(None),
        }
    }

    /// The actors the supervisor started so far.
    async fn actors(&self) -> Result<crate::actor::messages::Actors, ActorError> {
        ask(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::GetActors,
            CALL_TIMEOUT,
        )
        .await
    }

    /// Children that failed so far, with their error.
    pub async fn failures(&self) -> Result<Vec<String>, ActorError> {
        ask(
            &self.supervisor,
            "supervisor",
            SupervisorMsg::GetFailures,
            CALL_TIMEOUT,
        )
        .await
    }

    /// Stops every actor and waits until they have stopped.
    pub async fn stop(&self) {
        self.supervisor.stop(None);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// The scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerHandle(ActorRef<SchedulerMsg>);

impl SchedulerHandle {
    /// kube-scheduler could not place this pod.
    pub fn pod_pending(&self, pod: Pod) -> Result<(), ActorError> {
        tell(
            &self.0,
            "scheduler",
            SchedulerMsg::PodPending(Box::new(pod)),
        )
    }

    /// A CapacityBuffer, or what it refers to, changed: the next round takes it.
    pub fn buffers_changed(&self) -> Result<(), ActorError> {
        tell(&self.0, "scheduler", SchedulerMsg::BuffersChanged)
    }

    /// A pod was bound to a node.
    pub fn pod_bound(&self, uid: String, pod: String, node: String) -> Result<(), ActorError> {
        tell(
            &self.0,
            "scheduler",
            SchedulerMsg::PodBound { uid, pod, node },
        )
    }

    /// A pod was deleted.
    pub fn pod_deleted(&self, uid: String) -> Result<(), ActorError> {
        tell(&self.0, "scheduler", SchedulerMsg::PodDeleted { uid })
    }

    /// Its state now.
    pub async fn status(&self, timeout: Duration) -> Result<SchedulerStatus, ActorError> {
        ask(&self.0, "scheduler", SchedulerMsg::GetStatus, timeout).await
    }

    /// The round it would run now (its NodePools, their instance types, the nodes).
    pub async fn next_round(
        &self,
        timeout: Duration,
    ) -> Result<crate::actor::messages::DisruptionBase, ActorError> {
        ask(&self.0, "scheduler", SchedulerMsg::DisruptionBase, timeout).await
    }
}

/// The interruption actor.
#[derive(Debug, Clone)]
pub struct InterruptionHandle(ActorRef<InterruptionMsg>);

impl InterruptionHandle {
    /// A notice about an instance, parsed already.
    pub fn notice(&self, instance_id: String, kind: InterruptionKind) -> Result<(), ActorError> {
        tell(
            &self.0,
            "interruption",
            InterruptionMsg::Notice { instance_id, kind },
        )
    }

    /// Its counts now.
    pub async fn status(&self, timeout: Duration) -> Result<InterruptionStatus, ActorError> {
        ask(&self.0, "interruption", InterruptionMsg::GetStatus, timeout).await
    }
}

/// One NodeClaim's actor.
#[derive(Debug, Clone)]
pub struct NodeClaimHandle(ActorRef<NodeClaimMsg>);

impl NodeClaimHandle {
    fn tell(&self, message: NodeClaimMsg) -> Result<(), ActorError> {
        let who = self.0.get_name().unwrap_or_else(|| "nodeclaim".into());
        tell(&self.0, &who, message)
    }

    /// Its node joined the cluster.
    pub fn node_registered(&self, node: String) -> Result<(), ActorError> {
        self.tell(NodeClaimMsg::Input(Input::NodeRegistered { node }))
    }

    /// Its node became Ready (initialized).
    pub fn node_ready(&self) -> Result<(), ActorError> {
        self.tell(NodeClaimMsg::Input(Input::NodeReady))
    }

    /// Its NodeClaim or Node object was deleted at `since_ms` (journal clock), if known.
    pub fn deleted(&self, since_ms: Option<i64>) -> Result<(), ActorError> {
        self.tell(NodeClaimMsg::Input(Input::Deleted { since_ms }))
    }

    /// Its node or instance disappeared without the NodeClaim asking.
    pub fn node_gone(&self, reason: String) -> Result<(), ActorError> {
        self.tell(NodeClaimMsg::Input(Input::NodeGone { reason }))
    }

    /// Its node class may have changed: ask the cloud about its drift now.
    pub fn check_drift(&self) -> Result<(), ActorError> {
        self.tell(NodeClaimMsg::Input(Input::NodeClassChanged))
    }

    /// Its state now.
    pub async fn status(&self, timeout: Duration) -> Result<NodeClaimStatus, ActorError> {
        let who = self.0.get_name().unwrap_or_else(|| "nodeclaim".into());
        ask(&self.0, &who, NodeClaimMsg::GetStatus, timeout).await
    }
}

/// One NodePool's actor.
#[derive(Debug, Clone)]
pub struct NodePoolHandle(ActorRef<NodePoolMsg>);

impl NodePoolHandle {
    fn who(&self) -> String {
        self.0.get_name().unwrap_or_else(|| "nodepool".into())
    }

    /// Its node class changed: earlier registration outcomes say nothing about it.
    pub fn node_class_changed(&self) -> Result<(), ActorError> {
        tell(&self.0, &self.who(), NodePoolMsg::NodeClassChanged)
    }

    /// Its state now.
    pub async fn status(&self, timeout: Duration) -> Result<NodePoolStatus, ActorError> {
        ask(&self.0, &self.who(), NodePoolMsg::GetStatus, timeout).await
    }

    /// Adopts a NodeClaim whose instance survived a restart; returns once its actor runs,
    /// so messages for it can be delivered from then on.
    pub async fn adopt(&self, plan: NodeClaimPlan, adopt: Adopt) -> Result<(), ActorError> {
        ask(
            &self.0,
            &self.who(),
            |reply| NodePoolMsg::AdoptNodeClaim(Box::new(plan), Box::new(adopt), reply),
            ADOPT_TIMEOUT,
        )
        .await
    }
}
