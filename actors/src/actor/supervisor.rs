//! The supervisor: starts the scheduler, the NodePool actors, the interruption actor, the
//! garbage collector, the disruption controller, the journal keeper and (when the journal is
//! shipped) its shipper as linked children, and reports any child
//! that fails.

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tracing::error;

use super::Context;
use super::disruption::{DisruptionActor, DisruptionArgs};
use super::gc::GcActor;
use super::interruption::{InterruptionActor, InterruptionArgs};
use super::keeper::KeeperActor;
use super::messages::*;
use super::nodepool::{NodePoolActor, NodePoolArgs};
use super::scheduler::{SchedulerActor, SchedulerArgs};
use super::shipper::ShipperActor;
use karpenter_core::api::NodePool;
use karpenter_core::ports::InterruptionQueue;
use std::sync::Arc;

/// What the supervisor starts from.
pub struct SupervisorArgs {
    /// Shared context.
    pub ctx: Context,
    /// The NodePools to run.
    pub nodepools: Vec<NodePool>,
    /// The last scheduling round already in the journal (0 when starting anew).
    pub last_round: u64,
    /// Instance-type sets the journal holds that rounds used lately, with when (journal
    /// clock, ms): the scheduler does not record them again
    /// ([`ClusterView::recent_catalogs`](karpenter_core::events::ClusterView::recent_catalogs)).
    pub catalogs: std::collections::BTreeMap<String, i64>,
    /// The interruption queue to poll, if any (`--interruption-queue`).
    pub interruption_queue: Option<Arc<dyn InterruptionQueue>>,
    /// Garbage collection of leaked instances and orphaned NodeClaims, started at once;
    /// `None` when a restart adopts NodeClaims first (then [`SupervisorMsg::StartGc`]).
    pub gc: Option<GcSettings>,
    /// The disruption controller, started at once; `None` when a restart adopts NodeClaims
    /// first (then [`SupervisorMsg::StartDisruption`]).
    pub disruption: Option<DisruptionStart>,
}

/// The supervisor's state.
pub struct SupervisorState {
    actors: Actors,
    failures: Vec<String>,
    ctx: super::Context,
}

/// The supervisor actor.
pub struct SupervisorActor;

impl SupervisorState {
    /// Starts (linked) and keeps the actor of a NodePool that has none.
    async fn spawn_nodepool(
        &mut self,
        pool: NodePool,
        supervisor: &ActorRef<SupervisorMsg>,
    ) -> Result<ActorRef<NodePoolMsg>, ActorProcessingErr> {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let (actor, _) = Actor::spawn_linked(
            Some(self.ctx.nodepool_actor_name(&name)),
            NodePoolActor,
            NodePoolArgs {
                ctx: self.ctx.clone(),
                nodepool: pool,
                scheduler: self.actors.scheduler.clone(),
            },
            supervisor.get_cell(),
        )
        .await?;
        self.actors.nodepools.push(actor.clone());
        Ok(actor)
    }
}

async fn spawn_disruption(
    ctx: &super::Context,
    start: DisruptionStart,
    scheduler: &ActorRef<SchedulerMsg>,
    supervisor: &ActorRef<SupervisorMsg>,
) -> Result<ActorRef<DisruptionMsg>, ActorProcessingErr> {
    let (actor, _) = Actor::spawn_linked(
        Some(ctx.actor_name("disruption")),
        DisruptionActor,
        DisruptionArgs {
            ctx: ctx.clone(),
            scheduler: scheduler.clone(),
            start,
        },
        supervisor.get_cell(),
    )
    .await?;
    Ok(actor)
}

async fn spawn_gc(
    ctx: &super::Context,
    settings: GcSettings,
    supervisor: &ActorRef<SupervisorMsg>,
) -> Result<ActorRef<GcMsg>, ActorProcessingErr> {
    let (gc, _) = Actor::spawn_linked(
        Some(ctx.actor_name("gc")),
        GcActor,
        (ctx.clone(), settings),
        supervisor.get_cell(),
    )
    .await?;
    Ok(gc)
}

impl Actor for SupervisorActor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (scheduler, _) = Actor::spawn_linked(
            Some(args.ctx.actor_name("scheduler")),
            SchedulerActor,
            SchedulerArgs {
                ctx: args.ctx.clone(),
                last_round: args.last_round,
                catalogs: args.catalogs,
            },
            myself.get_cell(),
        )
        .await?;
        let mut nodepools = Vec::new();
        for nodepool in args.nodepools {
            let name = args
                .ctx
                .nodepool_actor_name(nodepool.metadata.name.as_deref().unwrap_or_default());
            let (pool, _) = Actor::spawn_linked(
                Some(name),
                NodePoolActor,
                NodePoolArgs {
                    ctx: args.ctx.clone(),
                    nodepool,
                    scheduler: scheduler.clone(),
                },
                myself.get_cell(),
            )
            .await?;
            scheduler.cast(SchedulerMsg::AddNodePool(pool.clone()))?;
            nodepools.push(pool);
        }
        let (interruption, _) = Actor::spawn_linked(
            Some(args.ctx.actor_name("interruption")),
            InterruptionActor,
            InterruptionArgs {
                ctx: args.ctx.clone(),
                queue: args.interruption_queue,
            },
            myself.get_cell(),
        )
        .await?;
        let gc = match args.gc {
            Some(settings) => Some(spawn_gc(&args.ctx, settings, &myself).await?),
            None => None,
        };
        let disruption = match args.disruption {
            Some(start) => Some(spawn_disruption(&args.ctx, start, &scheduler, &myself).await?),
            None => None,
        };
        let (keeper, _) = Actor::spawn_linked(
            Some(args.ctx.actor_name("keeper")),
            KeeperActor,
            (args.ctx.clone(), scheduler.clone()),
            myself.get_cell(),
        )
        .await?;
        let shipper = match &args.ctx.shipping {
            Some(shipping) => Some(
                Actor::spawn_linked(
                    Some(args.ctx.actor_name("shipper")),
                    ShipperActor,
                    (args.ctx.clone(), shipping.clone()),
                    myself.get_cell(),
                )
                .await?
                .0,
            ),
            None => None,
        };
        Ok(SupervisorState {
            actors: Actors {
                scheduler,
                nodepools,
                interruption,
                gc,
                disruption,
                keeper,
                shipper,
            },
            failures: Vec::new(),
            ctx: args.ctx.clone(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::ApplyNodePool(pool) => {
                let name = pool.metadata.name.clone().unwrap_or_default();
                let actor = match state.ctx.nodepool_actor(&name) {
                    Some(actor) => {
                        actor.cast(NodePoolMsg::Update(pool))?;
                        actor
                    }
                    None => state.spawn_nodepool(*pool, &myself).await?,
                };
                state
                    .actors
                    .scheduler
                    .cast(SchedulerMsg::AddNodePool(actor))?;
            }
            SupervisorMsg::RemoveNodePool(name) => {
                state.ctx.metrics.forget_nodepool_limits(&name);
                if let Some(actor) = state.ctx.nodepool_actor(&name) {
                    state
                        .actors
                        .scheduler
                        .cast(SchedulerMsg::RemoveNodePool(actor))?;
                }
            }
            SupervisorMsg::HostNodePool(pool, reply) => {
                let name = pool.metadata.name.clone().unwrap_or_default();
                if state.ctx.nodepool_actor(&name).is_none() {
                    state.spawn_nodepool(*pool, &myself).await?;
                }
                let _ = reply.send(());
            }
            SupervisorMsg::StartGc(settings) => {
                if state.actors.gc.is_none() {
                    state.actors.gc = Some(spawn_gc(&state.ctx, settings, &myself).await?);
                }
            }
            SupervisorMsg::StartDisruption(start) => {
                if state.actors.disruption.is_none() {
                    let scheduler = state.actors.scheduler.clone();
                    state.actors.disruption =
                        Some(spawn_disruption(&state.ctx, start, &scheduler, &myself).await?);
                }
            }
            SupervisorMsg::GetActors(reply) => {
                let _ = reply.send(state.actors.clone());
            }
            SupervisorMsg::GetFailures(reply) => {
                let _ = reply.send(state.failures.clone());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, failure) = event {
            let name = cell
                .get_name()
                .unwrap_or_else(|| format!("{:?}", cell.get_id()));
            error!(actor = %name, error = %failure, "Actor failed.");
            state.failures.push(format!("{name}: {failure}"));
        }
        Ok(())
    }
}
