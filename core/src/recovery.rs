//! What to do on start: reconcile the journal's view with what the cloud reports, so that a
//! restart neither launches a NodeClaim twice nor leaves an instance without a NodeClaim.
//! Pure: the caller replays the journal and lists the cloud, then carries the plan out.
//! What the garbage collector does between starts, pass by pass, is [`gc`].

use std::collections::{BTreeMap, BTreeSet};

use crate::api::NodeClaim;
use crate::api::nodeclaim::condition;
use crate::events::{ClusterView, NodeClaimState};
use crate::ports::{Instance, InstanceState};
use crate::vocab::labels;

pub mod gc;

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
    /// The NodeClaim object as the API server holds it, when adopting from the cluster: the
    /// actor keeps it (its labels, requirements and NodePool hash) instead of planning one
    /// from the NodePool's current template.
    pub object: Option<Box<NodeClaim>>,
}

impl Adopt {
    /// The plan its actor starts from when adopted from a NodeClaim object: no round and no
    /// planned pods (those were the old leader's), its requests from the object, and the
    /// running instance as its only instance type option.
    pub fn plan_from_object(&self) -> crate::events::NodeClaimPlan {
        let requests = self
            .object
            .as_ref()
            .and_then(|o| o.spec.resources.as_ref())
            .map(|r| {
                r.requests
                    .iter()
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect()
            })
            .unwrap_or_default();
        crate::events::NodeClaimPlan {
            nodeclaim: self.nodeclaim.clone(),
            nodepool: self.nodepool.clone(),
            round: 0,
            pods: Vec::new(),
            requests,
            instance_types: vec![crate::scheduling::InstanceTypeOption {
                name: self.instance.instance_type.as_str().into(),
                price: self.instance.price,
                zone: self.instance.zone.as_str().into(),
                capacity_type: self.instance.capacity_type,
            }],
            min_values_relaxed: false,
        }
    }
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
                    object: None,
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

/// What a new leader does with the NodeClaim objects it finds in the cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdoptionPlan {
    /// NodeClaims with a running instance: their actors start in the state the object's
    /// conditions record.
    pub adopt: Vec<Adopt>,
    /// NodeClaims never launched (no provider id, no instance tagged with their name):
    /// deleted, so their pods are planned again. An instance a launch still in flight
    /// creates afterwards is leaked, and the garbage collector terminates it.
    pub abandon: Vec<String>,
    /// NodeClaims that launched but whose instance is gone: `(name, node)`; the node (if
    /// any) is deleted and the object finalized.
    pub finalize: Vec<(String, Option<String>)>,
}

/// The state a NodeClaim object's conditions record.
pub fn recorded_state(object: &NodeClaim) -> NodeClaimState {
    let launched = object.condition_is_true(condition::LAUNCHED)
        || object
            .status
            .as_ref()
            .is_some_and(|s| s.provider_id.is_some());
    if object.condition_is_true(condition::INITIALIZED) {
        NodeClaimState::Initialized
    } else if object.condition_is_true(condition::REGISTERED) {
        NodeClaimState::Registered
    } else if launched {
        NodeClaimState::Launched
    } else {
        NodeClaimState::Pending
    }
}

/// The running instance a NodeClaim object owns: by provider id, or by its NodeClaim tag
/// when the launch was not recorded on the object.
pub fn running_instance<'a>(object: &NodeClaim, instances: &'a [Instance]) -> Option<&'a Instance> {
    let name = object.metadata.name.as_deref()?;
    let provider_id = object
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref());
    instances.iter().find(|i| {
        i.state == InstanceState::Running
            && (Some(i.provider_id.as_str()) == provider_id || i.nodeclaim == name)
    })
}

/// Plans the adoption of the cluster's NodeClaim objects that no actor runs, from the
/// objects and the cloud's list of this cluster's instances. An instance belongs to an object
/// by provider id, or by its NodeClaim tag when the launch was not recorded on the object.
/// Instances no object claims are left to the garbage collector, which waits out its grace
/// period first.
pub fn plan_adoption(objects: &[NodeClaim], instances: &[Instance]) -> AdoptionPlan {
    let mut plan = AdoptionPlan::default();
    for object in objects {
        let Some(name) = object.metadata.name.clone() else {
            continue;
        };
        let running = running_instance(object, instances);
        let state = recorded_state(object);
        let node = object.status.as_ref().and_then(|s| s.node_name.clone());
        match running {
            Some(instance) => plan.adopt.push(Adopt {
                nodeclaim: name,
                nodepool: object
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::NODEPOOL).cloned())
                    .unwrap_or_else(|| instance.nodepool.clone()),
                instance: instance.clone(),
                state: state.max(NodeClaimState::Launched),
                node,
                object: Some(Box::new(object.clone())),
            }),
            None if state == NodeClaimState::Pending => plan.abandon.push(name),
            None => plan.finalize.push((name, node)),
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
            price_source: None,
            reservation: None,
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
            reason: None,
        }
    }

    fn object(name: &str, provider_id: Option<&str>, conditions: &[&str]) -> NodeClaim {
        let mut object: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "resources": {"requests": {"cpu": "1500m"}}
            }
        }))
        .unwrap();
        let status = object.status.get_or_insert_with(Default::default);
        status.provider_id = provider_id.map(str::to_owned);
        status.node_name = conditions
            .contains(&condition::REGISTERED)
            .then(|| format!("node-of-{name}"));
        for c in conditions {
            object.set_condition(
                c,
                true,
                c,
                "",
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            );
        }
        object
    }

    #[test]
    fn a_new_leader_adopts_what_runs_and_ends_what_does_not() {
        let objects = vec![
            object(
                "initialized",
                Some("aws:///a/i-1"),
                &[
                    condition::LAUNCHED,
                    condition::REGISTERED,
                    condition::INITIALIZED,
                ],
            ),
            // Launched, but the old leader died before writing the provider id.
            object("unrecorded-launch", None, &[]),
            object("never-launched", None, &[]),
            object(
                "instance-gone",
                Some("aws:///a/i-9"),
                &[condition::LAUNCHED, condition::REGISTERED],
            ),
        ];
        let cloud = vec![
            instance("i-1", "initialized", InstanceState::Running),
            instance("i-2", "unrecorded-launch", InstanceState::Running),
            instance("i-9", "instance-gone", InstanceState::Terminated),
            instance("i-5", "not-ours-any-more", InstanceState::Running),
        ];
        let plan = plan_adoption(&objects, &cloud);
        let adopted: Vec<(&str, &str, NodeClaimState, Option<&str>)> = plan
            .adopt
            .iter()
            .map(|a| {
                (
                    a.nodeclaim.as_str(),
                    a.instance.id.as_str(),
                    a.state,
                    a.node.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            adopted,
            vec![
                (
                    "initialized",
                    "i-1",
                    NodeClaimState::Initialized,
                    Some("node-of-initialized")
                ),
                ("unrecorded-launch", "i-2", NodeClaimState::Launched, None),
            ]
        );
        assert!(plan.adopt.iter().all(|a| a.object.is_some()));
        assert_eq!(plan.abandon, vec!["never-launched".to_owned()]);
        assert_eq!(
            plan.finalize,
            vec![(
                "instance-gone".to_owned(),
                Some("node-of-instance-gone".to_owned())
            )]
        );
        // The leftover instance is the garbage collector's, after its grace period.
        let first = plan.adopt[0].plan_from_object();
        assert_eq!(first.requests["cpu"], "1500m");
        assert_eq!(&*first.instance_types[0].name, "m5.large");
        assert_eq!(first.nodepool, "general");
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
