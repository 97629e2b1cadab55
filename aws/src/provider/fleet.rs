//! CreateFleet calls shared by NodeClaims launched together: members asking for the same
//! thing share one call of their count, and each instance then gets its own tags.

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::warn;

use crate::ec2::Ec2;
use crate::error::AwsError;
use crate::selection::FleetPlan;

/// One NodeClaim's share of a CreateFleet call.
#[derive(Debug, Clone)]
pub(super) struct FleetMember {
    pub(super) plan: Arc<FleetPlan>,
    pub(super) templates: BTreeMap<String, String>,
    /// Tags every instance of the call gets.
    pub(super) shared_tags: BTreeMap<String, String>,
    /// Tags only this NodeClaim's instance gets (added right after launch).
    pub(super) own_tags: BTreeMap<String, String>,
    pub(super) client_token: String,
}

impl FleetMember {
    /// Members with the same key can share one CreateFleet call.
    fn key(&self) -> String {
        format!(
            "{:?}|{:?}|{:?}",
            self.plan
                .overrides
                .iter()
                .map(|o| (&o.instance_type, &o.zone, &o.subnet_id, &o.image_id))
                .collect::<Vec<_>>(),
            (self.plan.capacity_type, &self.templates),
            self.shared_tags
        )
    }
}

/// What one member got.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum FleetAnswer {
    /// An instance: (id, type, zone).
    Launched((String, String, String)),
    /// None; the per-override errors CreateFleet reported.
    Failed(Vec<(String, String, String, String)>),
}

/// Runs one batch: members with identical requests share one CreateFleet of their count;
/// each instance then gets its NodeClaim's own tags.
pub(super) async fn create_fleets(
    ec2: Ec2,
    members: Vec<FleetMember>,
) -> Vec<Result<FleetAnswer, AwsError>> {
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, member) in members.iter().enumerate() {
        groups.entry(member.key()).or_default().push(index);
    }
    let mut answers: Vec<Option<Result<FleetAnswer, AwsError>>> = vec![None; members.len()];
    let mut calls = tokio::task::JoinSet::new();
    for indices in groups.into_values() {
        let group: Vec<FleetMember> = indices.iter().map(|&i| members[i].clone()).collect();
        let ec2 = ec2.clone();
        calls.spawn(async move { (indices, fleet_for_group(&ec2, &group).await) });
    }
    while let Some(joined) = calls.join_next().await {
        if let Ok((indices, results)) = joined {
            for (index, result) in indices.into_iter().zip(results) {
                answers[index] = Some(result);
            }
        }
    }
    answers
        .into_iter()
        .map(|a| {
            a.unwrap_or_else(|| {
                Err(AwsError::new(
                    "CreateFleet",
                    "Aborted",
                    "the call did not finish",
                ))
            })
        })
        .collect()
}

async fn fleet_for_group(ec2: &Ec2, group: &[FleetMember]) -> Vec<Result<FleetAnswer, AwsError>> {
    let Some(first) = group.first() else {
        return Vec::new();
    };
    // One member keeps its own token; a shared call's token is derived from all of theirs,
    // so a retry of the same call is still idempotent.
    let token = if group.len() == 1 {
        first.client_token.clone()
    } else {
        let mut tokens: Vec<&str> = group.iter().map(|m| m.client_token.as_str()).collect();
        tokens.sort_unstable();
        let hash = karpenter_core::model::Fnv1a::default()
            .write(tokens.join(",").as_bytes())
            .finish();
        format!("fleet-{hash:016x}")
    };
    let outcome = match ec2
        .create_fleet(
            &first.plan,
            &first.templates,
            group.len() as i32,
            &token,
            &first.shared_tags,
        )
        .await
    {
        Ok(outcome) => outcome,
        Err(error) => return group.iter().map(|_| Err(error.clone())).collect(),
    };
    let mut launched = outcome.launched.into_iter();
    let mut out = Vec::with_capacity(group.len());
    for member in group {
        match launched.next() {
            Some(instance) => match ec2.create_tags(&instance.0, &member.own_tags).await {
                Ok(()) => out.push(Ok(FleetAnswer::Launched(instance))),
                Err(error) => {
                    // An instance its NodeClaim cannot be found by is worse than none.
                    if let Err(terminate) = ec2.terminate(std::slice::from_ref(&instance.0)).await {
                        warn!(instance.id = %instance.0, error = %terminate, "Could not terminate an instance left without its NodeClaim tag; the garbage collector reports it, and a restart's recovery terminates it.");
                    }
                    out.push(Err(error));
                }
            },
            None => out.push(Ok(FleetAnswer::Failed(outcome.errors.clone()))),
        }
    }
    // More instances than asked for (should not happen with instant fleets): give them back.
    let extra: Vec<String> = launched.map(|i| i.0).collect();
    if !extra.is_empty() {
        warn!(instances = ?extra, "CreateFleet launched more than asked; terminating the extra.");
        let _ = ec2.terminate(&extra).await;
    }
    out
}
