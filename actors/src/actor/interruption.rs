//! One actor per interruption event stream (an SQS queue on AWS, a channel in the simulator):
//! routes each notice to the NodeClaim owning the instance. Notices for instances no
//! NodeClaim owns are counted and logged, never dropped silently.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{info, warn};

use super::Context;
use super::nodeclaim::NodeClaimMsg;
use crate::events::InterruptionKind;
use crate::model::CapacityType;
use crate::ports::OfferingKey;

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
}

/// What the actor has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterruptionStatus {
    /// Notices received.
    pub received: u64,
    /// Notices delivered to a NodeClaim.
    pub delivered: u64,
    /// Notices about instances no NodeClaim owns.
    pub unowned: u64,
}

/// The interruption actor.
pub struct InterruptionActor;

/// Its state.
pub struct InterruptionState {
    ctx: Context,
    status: InterruptionStatus,
}

impl Actor for InterruptionActor {
    type Msg = InterruptionMsg;
    type State = InterruptionState;
    type Arguments = Context;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        ctx: Context,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(InterruptionState {
            ctx,
            status: InterruptionStatus::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            InterruptionMsg::Notice { instance_id, kind } => {
                state.status.received += 1;
                let message_type = serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                state.ctx.metrics.interruption_received(&message_type);
                let instance = match state.ctx.cloud.get(&instance_id).await {
                    Ok(instance) => instance,
                    Err(error) => {
                        state.status.unowned += 1;
                        warn!(instance.id = %instance_id, %error, "Interruption notice for an unknown instance.");
                        return Ok(());
                    }
                };
                if kind == InterruptionKind::SpotInterrupted
                    && instance.capacity_type == CapacityType::Spot
                {
                    state.ctx.cloud.mark_unavailable(&OfferingKey {
                        instance_type: instance.instance_type.clone(),
                        zone: instance.zone.clone(),
                        capacity_type: CapacityType::Spot,
                    });
                }
                match ractor::registry::where_is(
                    state.ctx.nodeclaim_actor_name(&instance.nodeclaim),
                ) {
                    Some(cell) => {
                        let actor: ActorRef<NodeClaimMsg> = cell.into();
                        actor.cast(NodeClaimMsg::Interrupted { kind })?;
                        state.status.delivered += 1;
                        info!(instance.id = %instance_id, nodeclaim = %instance.nodeclaim, ?kind, "Interruption delivered.");
                    }
                    None => {
                        state.status.unowned += 1;
                        warn!(instance.id = %instance_id, nodeclaim = %instance.nodeclaim, "Interruption notice for a NodeClaim that is already gone.");
                    }
                }
            }
            InterruptionMsg::GetStatus(reply) => {
                let _ = reply.send(state.status);
            }
        }
        Ok(())
    }
}
