//! One actor per interruption event stream (an SQS queue on AWS, direct notices in the
//! simulator): routes each notice to the NodeClaim owning the instance. Notices for instances
//! no NodeClaim owns are counted and logged, never dropped silently.
//!
//! With a queue, the actor long-polls it from a helper task (so status requests are answered
//! while a poll waits), and for every message: journals it (durably), acts on it, and only
//! then deletes it. A crash in between means the queue redelivers it after its visibility
//! timeout; acting twice is harmless (a draining NodeClaim ignores further notices).
//! Malformed messages are journaled, counted and deleted — never retried forever, never a
//! crash.
//!
//! Every minute (with the `ReservedCapacity` gate) it also asks the cloud which instances
//! run in an expiring Capacity Block and routes a `capacity_block_expiring` notice for each
//! one not noticed yet, as upstream's expiration controller drains them; a cloud that does
//! not look for them (the simulator, which notices on its own clock) is not asked again.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{Instrument, error, info, info_span, warn};

use super::Context;
use super::messages::*;

use karpenter_core::events::{DomainEvent, MessageOutcome};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::model::CapacityType;
use karpenter_core::ports::InterruptionKind;
use karpenter_core::ports::{
    CloudError, InterruptionQueue, OfferingKey, QueueMessage, QueueMessageContent,
};

/// Wait after a failed receive (or instance lookup) before trying again.
const RECEIVE_BACKOFF: Duration = Duration::from_secs(5);
/// How often expiring Capacity Blocks are looked for (upstream's cadence).
const BLOCK_CHECK: Duration = Duration::from_secs(60);

/// A notice is useless once its two-minute spot warning has passed: 24 tries, 5 s apart.
const MAX_ROUTE_ATTEMPTS: u32 = 24;
/// How long after launch an instance listed without its NodeClaim tag may still be ours,
/// its tag not visible yet.
const UNTAGGED_GRACE: Duration = Duration::from_secs(600);

/// What an interruption actor starts from.
pub struct InterruptionArgs {
    /// Shared context.
    pub ctx: Context,
    /// The queue to poll, if any.
    pub queue: Option<Arc<dyn InterruptionQueue>>,
}

/// The interruption actor.
pub struct InterruptionActor;

/// Its state.
pub struct InterruptionState {
    ctx: Context,
    queue: Option<Arc<dyn InterruptionQueue>>,
    status: InterruptionStatus,
    /// Instances already noticed as in an expiring Capacity Block.
    expiring: std::collections::BTreeSet<String>,
}

impl Actor for InterruptionActor {
    type Msg = InterruptionMsg;
    type State = InterruptionState;
    type Arguments = InterruptionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: InterruptionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        if args.queue.is_some() {
            myself.send_message(InterruptionMsg::Poll)?;
        }
        if args.ctx.settings.reserved_capacity {
            myself.send_message(InterruptionMsg::CheckBlocks)?;
        }
        Ok(InterruptionState {
            ctx: args.ctx,
            queue: args.queue,
            status: InterruptionStatus::default(),
            expiring: Default::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            InterruptionMsg::Notice { instance_id, kind } => {
                state.status.received += 1;
                state.ctx.metrics.interruption_received(kind.as_str());
                if state.route(&instance_id, kind).await? == Routed::Retry {
                    myself.send_after(RECEIVE_BACKOFF, move || InterruptionMsg::RouteAgain {
                        instance_id,
                        kind,
                        attempt: 1,
                    });
                }
            }
            InterruptionMsg::RouteAgain {
                instance_id,
                kind,
                attempt,
            } => match state.route(&instance_id, kind).await? {
                Routed::Retry if attempt < MAX_ROUTE_ATTEMPTS => {
                    myself.send_after(RECEIVE_BACKOFF, move || InterruptionMsg::RouteAgain {
                        instance_id,
                        kind,
                        attempt: attempt + 1,
                    });
                }
                Routed::Retry => {
                    state.status.unowned += 1;
                    error!(instance.id = %instance_id, ?kind, attempts = attempt + 1, "Giving up on an interruption notice: its instance cannot be looked up.");
                }
                _ => {}
            },
            InterruptionMsg::Poll => {
                if let Some(queue) = state.queue.clone() {
                    let span = info_span!("interruption_poll", queue = %queue.name());
                    tokio::spawn(
                        async move {
                            let result = queue.receive().await.map_err(|e| e.to_string());
                            // The actor may have stopped meanwhile; the messages then stay in
                            // the queue and are redelivered to the next poller.
                            let _ = myself.send_message(InterruptionMsg::Received(result));
                        }
                        .instrument(span),
                    );
                }
            }
            InterruptionMsg::Received(Ok(messages)) => {
                for message in messages {
                    state.handle_message(message).await?;
                }
                myself.send_message(InterruptionMsg::Poll)?;
            }
            InterruptionMsg::Received(Err(error)) => {
                state.status.queue_errors += 1;
                error!(%error, "Receiving from the interruption queue failed; retrying.");
                myself.send_after(RECEIVE_BACKOFF, || InterruptionMsg::Poll);
            }
            InterruptionMsg::CheckBlocks => {
                let cloud = state.ctx.cloud.clone();
                tokio::spawn(
                    async move {
                        let result = cloud
                            .expiring_block_instances()
                            .await
                            .map_err(|e| e.to_string());
                        let _ = myself.send_message(InterruptionMsg::BlocksChecked(result));
                    }
                    .instrument(info_span!("capacity_block_check")),
                );
            }
            InterruptionMsg::BlocksChecked(Ok(None)) => {}
            InterruptionMsg::BlocksChecked(Ok(Some(instances))) => {
                state.expiring.retain(|id| instances.contains(id));
                let kind = InterruptionKind::CapacityBlockExpiring;
                for instance_id in instances {
                    if !state.expiring.insert(instance_id.clone()) {
                        continue;
                    }
                    state.status.received += 1;
                    state.ctx.metrics.interruption_received(kind.as_str());
                    info!(instance.id = %instance_id, "Its Capacity Block is expiring: draining the node.");
                    if state.route(&instance_id, kind).await? == Routed::Retry {
                        myself.send_after(RECEIVE_BACKOFF, move || InterruptionMsg::RouteAgain {
                            instance_id,
                            kind,
                            attempt: 1,
                        });
                    }
                }
                myself.send_after(BLOCK_CHECK, || InterruptionMsg::CheckBlocks);
            }
            InterruptionMsg::BlocksChecked(Err(error)) => {
                warn!(%error, "Looking for expiring Capacity Blocks failed; trying again in a minute.");
                myself.send_after(BLOCK_CHECK, || InterruptionMsg::CheckBlocks);
            }
            InterruptionMsg::GetStatus(reply) => {
                let _ = reply.send(state.status);
            }
        }
        Ok(())
    }
}

/// What became of a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routed {
    /// Its NodeClaim has it.
    Delivered,
    /// No live NodeClaim owns the instance (or it does not exist).
    Unowned,
    /// The cloud could not say whose instance it is (the lookup failed or the instance is
    /// listed without its NodeClaim tag yet); try again later.
    Retry,
}

impl InterruptionState {
    /// Sends a notice to the NodeClaim owning the instance (and marks a spot offering
    /// unavailable on a spot warning).
    async fn route(
        &mut self,
        instance_id: &str,
        kind: InterruptionKind,
    ) -> Result<Routed, ActorProcessingErr> {
        let instance = match self.ctx.cloud_as("interruption").get(instance_id).await {
            Ok(instance) => instance,
            Err(CloudError::NotFound { .. }) => {
                self.status.unowned += 1;
                warn!(instance.id = %instance_id, "Interruption notice for an unknown instance.");
                return Ok(Routed::Unowned);
            }
            Err(error) => {
                warn!(instance.id = %instance_id, %error, "Cannot look up the interrupted instance.");
                return Ok(Routed::Retry);
            }
        };
        let young = instance.launched_at_ms.is_none_or(|at| {
            self.ctx.cloud.now_ms().saturating_sub(at) < UNTAGGED_GRACE.as_millis() as i64
        });
        if instance.nodeclaim.is_empty() && young {
            // EC2's tags are eventually consistent: a new instance may be listed before its
            // NodeClaim tag is. Ask again later rather than call it unowned (an old untagged
            // instance is someone else's and falls through to unowned).
            warn!(instance.id = %instance_id, "The interrupted instance is listed without its NodeClaim tag yet.");
            return Ok(Routed::Retry);
        }
        if kind == InterruptionKind::SpotInterrupted && instance.capacity_type == CapacityType::Spot
        {
            self.ctx.cloud.mark_unavailable(&OfferingKey {
                instance_type: instance.instance_type.clone(),
                zone: instance.zone.clone(),
                capacity_type: CapacityType::Spot,
            });
        }
        match self.ctx.nodeclaim_actor(&instance.nodeclaim) {
            Some(actor) => {
                actor.cast(NodeClaimMsg::Input(Input::Interrupted { kind }))?;
                self.status.delivered += 1;
                info!(instance.id = %instance_id, nodeclaim = %instance.nodeclaim, ?kind, "Interruption delivered.");
                Ok(Routed::Delivered)
            }
            None => {
                self.status.unowned += 1;
                warn!(instance.id = %instance_id, nodeclaim = %instance.nodeclaim, "Interruption notice for a NodeClaim that is already gone.");
                Ok(Routed::Unowned)
            }
        }
    }

    /// Journals one queue message, acts on it, then deletes it.
    async fn handle_message(&mut self, message: QueueMessage) -> Result<(), ActorProcessingErr> {
        let Some(queue) = self.queue.clone() else {
            return Ok(());
        };
        let (outcome, kind, instance_ids, detail) = match &message.content {
            QueueMessageContent::Notice { kind, instance_ids } => (
                MessageOutcome::Notice,
                Some(*kind),
                instance_ids.clone(),
                String::new(),
            ),
            QueueMessageContent::Ignored { reason } => {
                (MessageOutcome::Ignored, None, Vec::new(), reason.clone())
            }
            QueueMessageContent::Malformed { error } => {
                (MessageOutcome::Malformed, None, Vec::new(), error.clone())
            }
        };
        self.ctx
            .record_durably(&[DomainEvent::InterruptionMessage {
                queue: queue.name().to_owned(),
                message_id: message.id.clone(),
                outcome,
                kind,
                instance_ids: instance_ids.clone(),
                detail: detail.clone(),
            }])?;
        self.status.received += 1;
        let message_type = kind.map(InterruptionKind::as_str).unwrap_or(match outcome {
            MessageOutcome::Malformed => "malformed",
            _ => "noop",
        });
        self.ctx.metrics.interruption_received(message_type);
        match outcome {
            MessageOutcome::Notice => {
                let mut retry = false;
                if let Some(kind) = kind {
                    for instance_id in &instance_ids {
                        retry |= self.route(instance_id, kind).await? == Routed::Retry;
                    }
                }
                if retry {
                    // Left in the queue: it comes back after its visibility timeout, and
                    // NodeClaims already told ignore the repeat.
                    self.status.queue_errors += 1;
                    warn!(message.id = %message.id, "Interruption message kept for redelivery.");
                    return Ok(());
                }
            }
            MessageOutcome::Ignored => {
                info!(message.id = %message.id, reason = %detail, "Interruption message asks for nothing.");
            }
            MessageOutcome::Malformed => {
                self.status.messages_malformed += 1;
                warn!(message.id = %message.id, error = %detail, "Malformed interruption message; deleting it.");
            }
        }
        if let Some(sent_at_ms) = message.sent_at_ms {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(sent_at_ms);
            self.ctx
                .metrics
                .interruption_queue_duration(now_ms.saturating_sub(sent_at_ms) as f64 / 1000.0);
        }
        match queue.delete(&message.receipt).await {
            Ok(()) => {
                self.status.messages_deleted += 1;
                self.ctx.metrics.interruption_deleted();
            }
            Err(error) => {
                // It comes back after its visibility timeout and is handled again.
                self.status.queue_errors += 1;
                warn!(message.id = %message.id, %error, "Deleting an interruption message failed; it will be redelivered.");
            }
        }
        Ok(())
    }
}
