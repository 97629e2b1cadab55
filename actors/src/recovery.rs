//! What to do on start: reconcile the journal's view with what the cloud reports, so that a
//! restart neither launches a NodeClaim twice nor leaves an instance without a NodeClaim.
//! Pure: the caller replays the journal and lists the cloud, then carries the plan out.

use std::collections::{BTreeMap, BTreeSet};

use crate::events::{ClusterView, NodeClaimState};
use crate::ports::{Instance, InstanceState};

/// A NodeClaim whose instance is running: its actor restarts in its recorded state.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopt {
    /// NodeClaim name.
    pub nodeclaim: String,
    /// NodePool.
    pub nodepool: String,
    /// The running instance (from the cloud, which is authoritative).
    pub instance: Instance,
    /// The state to resume in (at least Launched).
    pub state: NodeClaimState,
    /// Its node, if it had registered.
    pub node: Option<String>,
}

/// The actions a start must take.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryPlan {
    /// NodeClaims with a running instance.
    pub adopt: Vec<Adopt>,
    /// NodeClaims whose launch intent was recorded but no instance exists: launch again with
    /// the same client token (idempotent, so a launch that did happen is not repeated).
    pub relaunch: Vec<String>,
    /// NodeClaims whose instance is gone: record them terminated.
    pub finalize: Vec<(String, String)>,
    /// Instances launched for this cluster that no live NodeClaim owns: terminate them.
    pub terminate: Vec<Instance>,
    /// NodeClaims planned but never sent to the cloud: drop them (their pods are re-planned).
    pub abandon: Vec<String>,
}

/// Builds the plan from the replayed journal and the cloud's list of our instances.
pub fn plan_recovery(view: &ClusterView, instances: &[Instance]) -> RecoveryPlan {
    let running: BTreeMap<&str, &Instance> = instances
        .iter()
        .filter(|i| i.state == InstanceState::Running)
        .map(|i| (i.nodeclaim.as_str(), i))
        .collect();
    let mut plan = RecoveryPlan::default();
    let mut owned: BTreeSet<&str> = BTreeSet::new();
    for (name, claim) in view.live_nodeclaims() {
        match (running.get(name.as_str()), claim.state) {
            (Some(instance), state) => {
                owned.insert(&instance.id);
                plan.adopt.push(Adopt {
                    nodeclaim: name.clone(),
                    nodepool: claim.nodepool.clone(),
                    instance: (*instance).clone(),
                    // A launch that happened but was not journaled resumes as Launched.
                    state: state.max(NodeClaimState::Launched),
                    node: claim.node.clone(),
                });
            }
            (None, NodeClaimState::Pending) if claim.client_token.is_some() => {
                plan.relaunch.push(name.clone())
            }
            (None, NodeClaimState::Pending) => plan.abandon.push(name.clone()),
            (None, _) => plan.finalize.push((
                name.clone(),
                "instance gone while the controller was down".into(),
            )),
        }
    }
    for instance in instances
        .iter()
        .filter(|i| i.state == InstanceState::Running)
    {
        if !owned.contains(instance.id.as_str()) {
            plan.terminate.push(instance.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::NodeClaimView;
    use crate::model::CapacityType;

    fn instance(id: &str, nodeclaim: &str, state: InstanceState) -> Instance {
        Instance {
            id: id.into(),
            provider_id: format!("aws:///a/{id}"),
            instance_type: "m5.large".into(),
            zone: "a".into(),
            capacity_type: CapacityType::Spot,
            price: 0.03,
            image_id: "ami".into(),
            nodeclaim: nodeclaim.into(),
            nodepool: "default".into(),
            state,
            launched_at_ms: None,
        }
    }

    fn claim(state: NodeClaimState, token: bool, instance: Option<Instance>) -> NodeClaimView {
        NodeClaimView {
            nodepool: "default".into(),
            state,
            instance,
            node: None,
            planned_pods: 1,
            round: 1,
            ended: None,
            client_token: token.then(|| "t".to_owned()),
            instance_types: Vec::new(),
            pods: vec!["u1".into()],
            min_values_relaxed: false,
        }
    }

    #[test]
    fn every_case_of_a_restart() {
        let mut view = ClusterView::default();
        let launched = instance("i-1", "running", InstanceState::Running);
        view.nodeclaims.insert(
            "running".into(),
            claim(NodeClaimState::Initialized, true, Some(launched.clone())),
        );
        view.nodeclaims.insert(
            "gone".into(),
            claim(
                NodeClaimState::Registered,
                true,
                Some(instance("i-2", "gone", InstanceState::Running)),
            ),
        );
        view.nodeclaims.insert(
            "launched-unrecorded".into(),
            claim(NodeClaimState::Pending, true, None),
        );
        view.nodeclaims.insert(
            "intent-only".into(),
            claim(NodeClaimState::Pending, true, None),
        );
        view.nodeclaims.insert(
            "planned-only".into(),
            claim(NodeClaimState::Pending, false, None),
        );
        let mut ended = claim(NodeClaimState::Terminated, true, None);
        ended.ended = Some("empty".into());
        view.nodeclaims.insert("ended".into(), ended);
        let cloud = vec![
            launched,
            instance("i-2", "gone", InstanceState::Terminated),
            instance("i-3", "launched-unrecorded", InstanceState::Running),
            instance("i-4", "someone-elses-leftover", InstanceState::Running),
        ];
        let plan = plan_recovery(&view, &cloud);
        let adopted: Vec<(&str, NodeClaimState)> = plan
            .adopt
            .iter()
            .map(|a| (a.nodeclaim.as_str(), a.state))
            .collect();
        assert_eq!(
            adopted,
            vec![
                ("launched-unrecorded", NodeClaimState::Launched),
                ("running", NodeClaimState::Initialized)
            ]
        );
        assert_eq!(plan.relaunch, vec!["intent-only".to_owned()]);
        assert_eq!(plan.abandon, vec!["planned-only".to_owned()]);
        assert_eq!(
            plan.finalize
                .iter()
                .map(|f| f.0.as_str())
                .collect::<Vec<_>>(),
            vec!["gone"]
        );
        assert_eq!(
            plan.terminate
                .iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>(),
            vec!["i-4"]
        );
    }

    #[test]
    fn no_instance_is_left_without_a_nodeclaim_and_none_is_launched_twice() {
        // Whatever the cloud holds, every running instance is either adopted or terminated,
        // and a NodeClaim with a running instance is never relaunched.
        let mut view = ClusterView::default();
        for (i, state) in [
            NodeClaimState::Pending,
            NodeClaimState::Launched,
            NodeClaimState::Initialized,
        ]
        .into_iter()
        .enumerate()
        {
            view.nodeclaims
                .insert(format!("nc-{i}"), claim(state, true, None));
        }
        for mask in 0u8..64 {
            let cloud: Vec<Instance> = (0..6)
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| {
                    instance(
                        &format!("i-{b}"),
                        &format!("nc-{}", b % 4),
                        InstanceState::Running,
                    )
                })
                .collect();
            let plan = plan_recovery(&view, &cloud);
            for i in &cloud {
                let adopted = plan.adopt.iter().any(|a| a.instance.id == i.id);
                let terminated = plan.terminate.iter().any(|t| t.id == i.id);
                assert!(
                    adopted ^ terminated,
                    "mask {mask}: {} neither or both",
                    i.id
                );
            }
            for name in &plan.relaunch {
                assert!(
                    !cloud.iter().any(|i| &i.nodeclaim == name),
                    "mask {mask}: {name} relaunched although running"
                );
            }
        }
    }
}
