//! Garbage collection between the cloud and the NodeClaims, both ways:
//! - an instance tagged for this cluster that no live NodeClaim owns (a crash between the
//!   cloud call and the journal, an actor that failed) is terminated once older than the
//!   grace period, and the termination is journaled first;
//! - a NodeClaim whose instance is terminated or gone is told so and finalizes, instead of
//!   waiting for a node that will never come.
//!
//! It runs on an interval; the decisions are [`plan`], a pure function.

use std::collections::BTreeSet;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};

use super::Context;
use super::messages::*;

use karpenter_core::events::{DomainEvent, NodeClaimState};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::ports::{CloudError, Instance, InstanceState};

/// The controller name its cloud calls are timed under.
const GC: &str = "nodeclaim.garbagecollection";

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// Instances to terminate: `(instance id, nodeclaim tag)`.
    pub leaked: Vec<(String, String)>,
    /// NodeClaims whose instance is terminated or gone: `(nodeclaim, instance id)`.
    pub orphaned: Vec<(String, String)>,
}

/// A live NodeClaim with an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveClaim {
    /// Name.
    pub name: String,
    /// Its instance.
    pub instance_id: String,
}

/// Decides a pass. `instances` is what the cloud lists; `live` the NodeClaims alive now
/// (with or without an instance); `gone` the instances the cloud says do not exist.
pub fn plan(
    instances: &[Instance],
    live: &BTreeSet<String>,
    claims: &[LiveClaim],
    gone: &BTreeSet<String>,
    now_ms: i64,
    grace: Duration,
) -> GcPlan {
    let mut out = GcPlan::default();
    for instance in instances {
        let old_enough = instance
            .launched_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= grace.as_millis() as i64);
        if instance.state == InstanceState::Running
            && !live.contains(&instance.nodeclaim)
            && old_enough
        {
            out.leaked
                .push((instance.id.clone(), instance.nodeclaim.clone()));
        }
    }
    for claim in claims {
        let listed = instances.iter().find(|i| i.id == claim.instance_id);
        let ended = match listed {
            Some(i) => i.state != InstanceState::Running,
            None => gone.contains(&claim.instance_id),
        };
        if ended {
            out.orphaned
                .push((claim.name.clone(), claim.instance_id.clone()));
        }
    }
    out
}

/// The garbage collector actor.
pub struct GcActor;

/// Its state.
pub struct GcState {
    ctx: Context,
    settings: GcSettings,
    status: GcStatus,
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
        let instances = self.ctx.cloud_as(GC).list().await?;
        let mut live = BTreeSet::new();
        let mut claims = Vec::new();
        for (name, actor) in self.ctx.nodeclaim_actors() {
            live.insert(name.clone());
            // A NodeClaim that stops while we ask is no longer live: nothing to do for it.
            if let Ok(status) = ractor::call_t!(actor, NodeClaimMsg::GetStatus, 5_000)
                && let Some(instance) = status.instance
                && status.state >= NodeClaimState::Launched
                && status.state < NodeClaimState::Terminating
            {
                claims.push(LiveClaim {
                    name,
                    instance_id: instance.id,
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
        let decided = plan(
            &instances,
            &live,
            &claims,
            &gone,
            wall_clock_ms(),
            self.settings.grace,
        );
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::model::CapacityType;

    fn instance(
        id: &str,
        nodeclaim: &str,
        state: InstanceState,
        launched_at_ms: Option<i64>,
    ) -> Instance {
        Instance {
            id: id.into(),
            provider_id: format!("aws:///a/{id}"),
            instance_type: "m5.large".into(),
            zone: "a".into(),
            capacity_type: CapacityType::OnDemand,
            price: 0.1,
            image_id: "ami".into(),
            nodeclaim: nodeclaim.into(),
            nodepool: "default".into(),
            state,
            launched_at_ms,
        }
    }

    #[test]
    fn leaked_instances_past_grace_and_claims_without_instances() {
        let grace = Duration::from_secs(300);
        let now = 1_000_000_000;
        let instances = vec![
            instance("i-owned", "a", InstanceState::Running, Some(0)),
            instance("i-leaked", "b", InstanceState::Running, Some(0)),
            instance("i-young", "c", InstanceState::Running, Some(now - 1_000)),
            instance("i-dead", "d", InstanceState::Terminated, Some(0)),
            instance("i-unknown-age", "e", InstanceState::Running, None),
        ];
        let live: BTreeSet<String> = ["a", "d", "f", "g"].into_iter().map(String::from).collect();
        let claims = vec![
            LiveClaim {
                name: "a".into(),
                instance_id: "i-owned".into(),
            },
            LiveClaim {
                name: "d".into(),
                instance_id: "i-dead".into(),
            },
            LiveClaim {
                name: "f".into(),
                instance_id: "i-vanished".into(),
            },
            LiveClaim {
                name: "g".into(),
                instance_id: "i-not-yet-listed".into(),
            },
        ];
        let gone: BTreeSet<String> = ["i-vanished".to_owned()].into();
        let decided = plan(&instances, &live, &claims, &gone, now, grace);
        assert_eq!(
            decided.leaked,
            vec![
                ("i-leaked".to_owned(), "b".to_owned()),
                ("i-unknown-age".to_owned(), "e".to_owned())
            ]
        );
        assert_eq!(
            decided.orphaned,
            vec![
                ("d".to_owned(), "i-dead".to_owned()),
                ("f".to_owned(), "i-vanished".to_owned())
            ]
        );
    }
}
