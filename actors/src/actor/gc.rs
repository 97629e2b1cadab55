//! The garbage collector actor: on an interval it lists the cloud, gathers who owns what
//! (the NodeClaim actors that run, the launch intents the journal keeper holds open, the
//! instances live NodeClaims hold) and carries out what
//! [`karpenter_core::recovery::gc::plan`] decides: leaked instances terminated, the
//! termination journaled first; NodeClaims whose instance is gone told so. Why each
//! decision needs two passes, a known launch time and a tag is the plan's story.

use std::collections::BTreeSet;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};

use super::messages::*;
use super::{ASK_MS, Context};

use karpenter_core::events::{DomainEvent, NodeClaimState};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::ports::{CloudError, InstanceState};
use karpenter_core::recovery::gc::{GcInput, GcMemory, LiveClaim, plan};

/// The controller name its cloud calls are timed under.
const GC: &str = "nodeclaim.garbagecollection";

/// The garbage collector actor.
pub struct GcActor;

/// Its state.
pub struct GcState {
    ctx: Context,
    settings: GcSettings,
    status: GcStatus,
    /// What the last pass saw, for this one to confirm.
    memory: GcMemory,
    /// Untagged instances already warned about.
    warned: BTreeSet<String>,
}

impl Actor for GcActor {
    type Msg = GcMsg;
    type State = GcState;
    type Arguments = (Context, GcSettings);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (ctx, settings): (Context, GcSettings),
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(settings.interval, || GcMsg::Run);
        Ok(GcState {
            ctx,
            settings,
            status: GcStatus::default(),
            memory: GcMemory::default(),
            warned: BTreeSet::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            GcMsg::Run => {
                if let Err(error) = state.pass().await {
                    state.status.failures += 1;
                    // Two consecutive passes must agree: a failed one breaks the run.
                    state.memory = GcMemory::default();
                    warn!(%error, "Garbage collection pass failed; retrying next interval.");
                }
            }
            GcMsg::GetStatus(reply) => {
                let _ = reply.send(state.status);
            }
        }
        Ok(())
    }
}

impl GcState {
    async fn pass(&mut self) -> Result<(), ActorProcessingErr> {
        self.status.passes += 1;
        // The listing first: every instance in it was launched after its NodeClaim's actor
        // started and its launch intent was flushed, so the owners gathered next include it.
        let instances = self.ctx.cloud_as(GC).list().await?;
        let now_ms = self.ctx.cloud.now_ms();
        let mut owners = self.open_launches().await?;
        let mut claims = Vec::new();
        for (name, actor) in self.ctx.nodeclaim_actors() {
            owners.insert(name.clone());
            // A NodeClaim that stops while we ask is no longer live: nothing to do for it.
            if let Ok(status) = ractor::call_t!(actor, NodeClaimMsg::GetStatus, 5_000)
                && let Some(instance) = status.instance
                && status.state >= NodeClaimState::Launched
                && status.state < NodeClaimState::Terminating
            {
                claims.push(LiveClaim {
                    name,
                    instance_id: instance.id,
                    launched_at_ms: instance.launched_at_ms,
                });
            }
        }
        let mut gone = BTreeSet::new();
        for claim in &claims {
            if !instances.iter().any(|i| i.id == claim.instance_id) {
                match self.ctx.cloud_as(GC).get(&claim.instance_id).await {
                    Err(CloudError::NotFound { .. }) => {
                        gone.insert(claim.instance_id.clone());
                    }
                    Ok(i) if i.state != InstanceState::Running => {
                        gone.insert(claim.instance_id.clone());
                    }
                    _ => {}
                }
            }
        }
        let input = GcInput {
            instances: &instances,
            owners: &owners,
            claims: &claims,
            gone: &gone,
            now_ms,
            grace: self.settings.grace,
        };
        let decided = plan(&input, &self.memory);
        self.memory = decided.memory;
        self.status.untagged = decided.untagged.len() as u64;
        self.warned.retain(|id| decided.untagged.contains(id));
        for instance_id in decided.untagged {
            if self.warned.insert(instance_id.clone()) {
                warn!(instance.id = %instance_id, "An instance of this cluster has no NodeClaim tag past the grace period; it is not collected while running (a restart's recovery terminates it).");
            }
        }
        for (instance_id, nodeclaim) in decided.leaked {
            self.ctx
                .record_durably(&[DomainEvent::InstanceGarbageCollected {
                    instance_id: instance_id.clone(),
                    nodeclaim: nodeclaim.clone(),
                    reason: "no live NodeClaim owns it".into(),
                }])?;
            warn!(instance.id = %instance_id, %nodeclaim, "Terminating an instance no NodeClaim owns.");
            self.ctx.cloud_as(GC).delete(&instance_id).await?;
            self.status.instances_collected += 1;
        }
        for (nodeclaim, instance_id) in decided.orphaned {
            if let Some(actor) = self.ctx.nodeclaim_actor(&nodeclaim) {
                info!(%nodeclaim, instance.id = %instance_id, "Instance is gone; finalizing its NodeClaim.");
                let _ = actor.cast(NodeClaimMsg::Input(Input::NodeGone {
                    reason: "instance_terminated".into(),
                }));
                self.status.nodeclaims_finalized += 1;
            }
        }
        Ok(())
    }

    /// The NodeClaims whose launch intent the journal holds open; an error when the keeper
    /// cannot say (then nothing is collected).
    async fn open_launches(&self) -> Result<BTreeSet<String>, ActorProcessingErr> {
        let keeper = self
            .ctx
            .keeper()
            .ok_or("the journal keeper is not running; cannot tell which launches are open")?;
        ractor::call_t!(keeper, KeeperMsg::OpenLaunches, ASK_MS).map_err(|e| {
            format!("the journal keeper did not say which launches are open: {e}").into()
        })
    }
}
