//! The status the controller reports on NodePools and EC2NodeClasses, decided without I/O:
//! a NodePool's nodes and their summed capacity, and its conditions (`ValidationSucceeded`,
//! `NodeClassReady`, `UnsupportedFields`, the root `Ready`); an EC2NodeClass's conditions
//! under the in-memory cloud, which needs nothing resolved, and its `UnsupportedFields`.

use std::collections::BTreeMap;

use crate::api::nodeclaim::put_condition;
use crate::api::unsupported::{self, Unsupported};
use crate::api::{EC2NodeClass, NodeOverlay, NodePool, NodePoolStatus, Validate};
use crate::model::Resources;
use crate::model::registration_health::Verdict;
use crate::vocab::labels;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Validation problems as one line, for conditions and Events.
pub fn problems_text(problems: &crate::api::validation::Problems) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `ValidationSucceeded`, False with the problems when there are any.
fn put_validation(conditions: &mut Vec<Condition>, problems: &str, now: &Time, generation: i64) {
    let valid = problems.is_empty();
    let reason = if valid {
        "ValidationSucceeded"
    } else {
        "ValidationFailed"
    };
    put_condition(
        conditions,
        "ValidationSucceeded",
        valid,
        reason,
        problems,
        now.clone(),
        generation,
    );
}

/// `UnsupportedFields`, True naming each field the object sets that karpenter-rs does not act
/// on; absent when there are none (as `Drifted` is on a NodeClaim that has not drifted).
pub fn put_unsupported(
    conditions: &mut Vec<Condition>,
    fields: &[Unsupported],
    now: &Time,
    generation: i64,
) {
    if fields.is_empty() {
        conditions.retain(|c| c.type_ != unsupported::CONDITION);
    } else {
        put_condition(
            conditions,
            unsupported::CONDITION,
            true,
            unsupported::REASON,
            &unsupported::summary(fields),
            now.clone(),
            generation,
        );
    }
}

/// An EC2NodeClass's `UnsupportedFields`, added to the conditions of either cloud.
pub fn put_nodeclass_unsupported(
    class: &EC2NodeClass,
    conditions: &mut Vec<Condition>,
    now: &Time,
) {
    let generation = class.metadata.generation.unwrap_or(0);
    put_unsupported(
        conditions,
        &unsupported::ec2nodeclass(class),
        now,
        generation,
    );
}

/// The `UnsupportedFields` condition's message, when it is set.
pub fn unsupported_message(conditions: &[Condition]) -> Option<&str> {
    conditions
        .iter()
        .find(|c| c.type_ == unsupported::CONDITION && c.status == "True")
        .map(|c| c.message.as_str())
}

/// Why a round leaves a NodePool out: it is not `Ready`, as upstream's provisioner skips
/// such pools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NodePool {nodepool} is not Ready ({reason}): {message}")]
pub struct NodePoolNotReady {
    /// The NodePool.
    pub nodepool: String,
    /// The `Ready` condition's reason: `ValidationFailed`, `UnsupportedField`,
    /// `NodeClassNotReady` or `Terminating`.
    pub reason: &'static str,
    /// What is wrong, and so what to fix.
    pub message: String,
}

/// Whether `pool` itself may be provisioned for (its node class is the cloud's to judge):
/// valid, using no field not acted on that would change what it launches, and not being
/// deleted; the same verdict its `Ready` condition gives.
pub fn nodepool_readiness(pool: &NodePool) -> Result<(), NodePoolNotReady> {
    let not_ready = |reason, message| NodePoolNotReady {
        nodepool: pool.metadata.name.clone().unwrap_or_default(),
        reason,
        message,
    };
    let problems = pool.validate();
    if !problems.is_empty() {
        return Err(not_ready("ValidationFailed", problems_text(&problems)));
    }
    let blocking: Vec<Unsupported> = unsupported::nodepool(pool)
        .into_iter()
        .filter(|f| f.blocks)
        .collect();
    if !blocking.is_empty() {
        return Err(not_ready(
            unsupported::REASON,
            unsupported::summary(&blocking),
        ));
    }
    if pool.metadata.deletion_timestamp.is_some() {
        return Err(not_ready(
            "Terminating",
            "the NodePool is being deleted".into(),
        ));
    }
    Ok(())
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The status of `pool` given every Node, its node class (`None` when it does not exist)
/// and what its NodeClaims' registrations say (`None`: nothing yet).
pub fn nodepool_status(
    pool: &NodePool,
    nodes: &[std::sync::Arc<Node>],
    nodeclass: Option<&EC2NodeClass>,
    registration: Option<&Verdict>,
    now: &Time,
) -> NodePoolStatus {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let generation = pool.metadata.generation.unwrap_or(0);
    let mut status = pool.status.clone().unwrap_or_default();
    let mine: Vec<&Node> = nodes
        .iter()
        .map(|n| n.as_ref())
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                == Some(&name)
        })
        .collect();
    let capacity = mine.iter().fold(Resources::ZERO, |acc, n| {
        let capacity = n
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| {
                Resources::from_quantities(c.iter().map(|(k, v)| (k.as_str(), v.0.as_str()))).ok()
            })
            .map(|(r, _)| r)
            .unwrap_or_default();
        acc.add(&capacity)
    });
    let mut resources: BTreeMap<String, Quantity> = capacity
        .to_quantities()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v)))
        .collect();
    resources.insert("nodes".into(), Quantity(mine.len().to_string()));
    status.resources = resources;
    status.nodes = Some(mine.len() as i64);
    let problems = pool.validate();
    let valid = problems.is_empty();
    let message = problems_text(&problems);
    let conditions = &mut status.conditions;
    put_validation(conditions, &message, now, generation);
    let class_ref = &pool.spec.template.spec.node_class_ref;
    let (class_ready, class_reason, class_message) = match nodeclass {
        None => (
            false,
            "NodeClassNotFound",
            format!("{} {} does not exist", class_ref.kind, class_ref.name),
        ),
        Some(c) if c.metadata.deletion_timestamp.is_some() => (
            false,
            "NodeClassTerminating",
            format!("{} {} is being deleted", class_ref.kind, class_ref.name),
        ),
        Some(c) => {
            let ready = c
                .status
                .as_ref()
                .is_some_and(|s| is_true(&s.conditions, "Ready"));
            if ready {
                (true, "NodeClassReady", String::new())
            } else {
                (
                    false,
                    "NodeClassNotReady",
                    format!("{} {} is not Ready", class_ref.kind, class_ref.name),
                )
            }
        }
    };
    put_condition(
        conditions,
        "NodeClassReady",
        class_ready,
        class_reason,
        &class_message,
        now.clone(),
        generation,
    );
    let fields = unsupported::nodepool(pool);
    put_unsupported(conditions, &fields, now, generation);
    let blocking: Vec<Unsupported> = fields.into_iter().filter(|f| f.blocks).collect();
    let ready = valid && blocking.is_empty() && class_ready;
    let (reason, message) = if !valid {
        ("ValidationFailed", message)
    } else if !blocking.is_empty() {
        (unsupported::REASON, unsupported::summary(&blocking))
    } else if !class_ready {
        ("NodeClassNotReady", class_message)
    } else {
        ("Ready", String::new())
    };
    put_condition(
        conditions,
        "Ready",
        ready,
        reason,
        &message,
        now.clone(),
        generation,
    );
    let class_generation = nodeclass.and_then(|c| c.metadata.generation);
    let changed = status.node_class_observed_generation != class_generation
        || status
            .conditions
            .iter()
            .find(|c| c.type_ == REGISTRATION_HEALTHY)
            .is_none_or(|c| c.observed_generation != Some(generation));
    put_registration_health(
        &mut status.conditions,
        registration,
        changed,
        now,
        generation,
    );
    status.node_class_observed_generation = class_generation;
    status
}

/// The NodePool condition saying whether its nodes register.
pub const REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

/// `NodeRegistrationHealthy` from the verdict; without one the condition stands unless the
/// NodePool or its node class changed (or it is missing), which makes it `Unknown`.
fn put_registration_health(
    conditions: &mut Vec<Condition>,
    verdict: Option<&Verdict>,
    changed: bool,
    now: &Time,
    generation: i64,
) {
    let (status, reason, message) = match verdict {
        Some(Verdict::Healthy) => ("True", REGISTRATION_HEALTHY, String::new()),
        Some(Verdict::Unhealthy(why)) => (
            "False",
            "RegistrationFailed",
            format!(
                "NodeClaims of this NodePool keep failing to launch or register (latest: {why}); check the node class's subnets, security groups, AMI and instance profile"
            ),
        ),
        None if changed => ("Unknown", "AwaitingReconciliation", String::new()),
        None => return,
    };
    conditions.retain(|c| c.type_ != REGISTRATION_HEALTHY || c.status == status);
    match conditions
        .iter_mut()
        .find(|c| c.type_ == REGISTRATION_HEALTHY)
    {
        Some(c) => {
            c.reason = reason.to_owned();
            c.message = message;
            c.observed_generation = Some(generation);
        }
        None => conditions.push(Condition {
            type_: REGISTRATION_HEALTHY.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: now.clone(),
            observed_generation: Some(generation),
        }),
    }
}

/// The conditions of an EC2NodeClass under the in-memory cloud: nothing to resolve, and the
/// API server admitted it against the CRD's rules, so valid and Ready.
pub fn simulated_nodeclass_conditions(class: &EC2NodeClass, now: &Time) -> Vec<Condition> {
    let generation = class.metadata.generation.unwrap_or(0);
    let mut conditions = class
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    put_validation(&mut conditions, "", now, generation);
    put_condition(
        &mut conditions,
        "Ready",
        true,
        "SimulatedCloud",
        "the in-memory cloud needs no subnets, security groups, AMIs or instance profile",
        now.clone(),
        generation,
    );
    conditions
}

/// The conditions of a NodeOverlay: `ValidationSucceeded` (False with the problems; with
/// reason `Conflict` when an overlay of the same weight, applied instead, sets the price or
/// a capacity resource of some of the same offerings: `applied_instead`; with reason
/// `RuntimeValidation` when an extended resource it adds found no place to be tracked),
/// and `Ready` following it.
pub fn nodeoverlay_conditions(
    overlay: &NodeOverlay,
    applied_instead: Option<&str>,
    now: &Time,
) -> Vec<Condition> {
    let generation = overlay.metadata.generation.unwrap_or(0);
    let mut conditions = overlay
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let problems = problems_text(&overlay.validate());
    let untracked = overlay.untracked_capacity();
    let (valid, reason, message) = match applied_instead {
        _ if !problems.is_empty() => (false, "ValidationFailed", problems),
        _ if !untracked.is_empty() => (
            false,
            "RuntimeValidation",
            format!(
                "capacity {} not applied: an extended resource is a domain-prefixed name (smarter-devices/fuse) or hugepages-<size>, and karpenter-rs tracks at most {} distinct ones (others took every place); fix the name or remove extended resources no pod uses",
                untracked.join(", "),
                crate::model::resources::EXTENDED_SLOTS
            ),
        ),
        Some(other) => (
            false,
            "Conflict",
            format!(
                "conflicts with NodeOverlay {other}: both have the same weight and set the price or a capacity resource of some of the same offerings, so only {other} (later by name) is applied there; give the two different weights"
            ),
        ),
        None => (true, "ValidationSucceeded", String::new()),
    };
    for type_ in ["ValidationSucceeded", "Ready"] {
        put_condition(
            &mut conditions,
            type_,
            valid,
            reason,
            &message,
            now.clone(),
            generation,
        );
    }
    let fields = unsupported::nodeoverlay(overlay);
    put_unsupported(&mut conditions, &fields, now, generation);
    conditions
}

/// A condition's `lastTransitionTime` changes only when its status does: each condition in
/// `wanted` whose status matches the EC2NodeClass's current one keeps that one's time.
pub fn keep_transition_times(class: &EC2NodeClass, wanted: &mut [Condition]) {
    let current = class
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    keep_times(current, wanted);
}

/// Each condition in `wanted` whose status matches its `current` one keeps that one's
/// `lastTransitionTime`.
pub fn keep_times(current: &[Condition], wanted: &mut [Condition]) {
    for condition in wanted {
        if let Some(before) = current
            .iter()
            .find(|c| c.type_ == condition.type_ && c.status == condition.status)
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
}

/// Whether two condition lists say the same (ignoring transition times), so unchanged
/// statuses are not written again.
pub fn same_conditions(a: &[Condition], b: &[Condition]) -> bool {
    let key = |c: &Condition| {
        (
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn now() -> Time {
        Time(jiff::Timestamp::UNIX_EPOCH)
    }

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "generation": 2},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }}}
        }))
        .unwrap()
    }

    fn class() -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": 1},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}
        }))
        .unwrap()
    }

    fn node(pool: &str, cpu: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("n-{cpu}"), "labels": {"karpenter.sh/nodepool": pool}},
                "status": {"capacity": {"cpu": cpu, "memory": "4Gi", "pods": "10"}}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pool_counts_its_nodes_and_is_ready_with_a_ready_class() {
        let mut class = class();
        class.status = Some(crate::api::EC2NodeClassStatus {
            conditions: simulated_nodeclass_conditions(&class, &now()),
            ..Default::default()
        });
        let nodes = [
            node("general", "2"),
            node("general", "4"),
            node("other", "8"),
        ];
        let status = nodepool_status(&pool(), &nodes, Some(&class), None, &now());
        assert_eq!(status.nodes, Some(2));
        assert_eq!(status.resources["cpu"].0, "6");
        assert_eq!(status.resources["nodes"].0, "2");
        assert!(is_true(&status.conditions, "Ready"));
        assert_eq!(status.node_class_observed_generation, Some(1));
    }

    #[test]
    fn a_pool_without_its_class_is_not_ready_and_says_why() {
        let status = nodepool_status(&pool(), &[], None, None, &now());
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "NodeClassNotReady");
        assert!(
            ready
                .message
                .contains("EC2NodeClass default does not exist")
        );
        assert_eq!(status.resources["nodes"].0, "0");
    }

    #[test]
    fn an_invalid_or_deleted_pool_is_not_ready_whatever_its_class() {
        assert_eq!(nodepool_readiness(&pool()), Ok(()));
        let mut invalid = pool();
        invalid.spec.template.spec.requirements = serde_json::from_value(json!([
            {"key": "team", "operator": "Gt", "values": ["x"]}
        ]))
        .unwrap();
        let why = nodepool_readiness(&invalid).unwrap_err();
        assert_eq!(
            (why.nodepool.as_str(), why.reason),
            ("general", "ValidationFailed")
        );
        assert!(why.message.contains("requirements"), "{}", why.message);
        let mut deleted = pool();
        deleted.metadata.deletion_timestamp = Some(now());
        assert_eq!(
            nodepool_readiness(&deleted).unwrap_err().reason,
            "Terminating"
        );
    }

    #[test]
    fn fields_not_acted_on_are_reported_and_a_static_pool_is_not_ready() {
        let mut class = class();
        class.status = Some(crate::api::EC2NodeClassStatus {
            conditions: simulated_nodeclass_conditions(&class, &now()),
            ..Default::default()
        });
        let condition = |status: &NodePoolStatus, type_: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let mut pool = pool();
        // Balanced is acted on: not reported.
        pool.spec.disruption.consolidation_policy =
            crate::api::nodepool::ConsolidationPolicy::Balanced;
        let status = nodepool_status(&pool, &[], Some(&class), None, &now());
        assert_eq!(condition(&status, unsupported::CONDITION), None);
        assert_eq!(condition(&status, "Ready").unwrap().0, "True");
        assert_eq!(nodepool_readiness(&pool), Ok(()));

        // A static pool is acted on too: Ready, nothing reported.
        pool.spec.replicas = Some(3);
        let status = nodepool_status(&pool, &[], Some(&class), None, &now());
        assert_eq!(condition(&status, unsupported::CONDITION), None);
        assert_eq!(condition(&status, "Ready").unwrap().0, "True");
        assert_eq!(nodepool_readiness(&pool), Ok(()));

        // Both fields removed: the condition goes.
        pool.spec.replicas = None;
        pool.spec.disruption.consolidation_policy =
            crate::api::nodepool::ConsolidationPolicy::WhenEmptyOrUnderutilized;
        let status = nodepool_status(&pool, &[], Some(&class), None, &now());
        assert_eq!(condition(&status, unsupported::CONDITION), None);
        assert_eq!(condition(&status, "Ready").unwrap().0, "True");
    }

    #[test]
    fn capacity_reservations_are_no_longer_reported_unsupported() {
        let mut class = class();
        class.spec.capacity_reservation_selector_terms =
            serde_json::from_value(json!([{"id": "cr-0123456789abcdef0"}])).unwrap();
        let mut conditions = simulated_nodeclass_conditions(&class, &now());
        // What an earlier version reported goes once the class is seen again.
        put_unsupported(
            &mut conditions,
            &[unsupported::Unsupported {
                field: "spec.capacityReservationSelectorTerms",
                message: "not supported",
                blocks: false,
            }],
            &now(),
            1,
        );
        assert!(unsupported_message(&conditions).is_some());
        put_nodeclass_unsupported(&class, &mut conditions, &now());
        assert_eq!(unsupported_message(&conditions), None);
        assert!(is_true(&conditions, "Ready"));
    }

    #[test]
    fn registration_health_is_unknown_until_told_and_reset_by_a_change() {
        let class = class();
        let health = |pool: &NodePool| {
            pool.status
                .as_ref()
                .unwrap()
                .conditions
                .iter()
                .find(|c| c.type_ == REGISTRATION_HEALTHY)
                .map(|c| (c.status.clone(), c.reason.clone()))
                .unwrap()
        };
        let mut pool = pool();
        pool.status = Some(nodepool_status(&pool, &[], Some(&class), None, &now()));
        assert_eq!(health(&pool).0, "Unknown");
        let unhealthy = Verdict::Unhealthy("registration_timeout".into());
        pool.status = Some(nodepool_status(
            &pool,
            &[],
            Some(&class),
            Some(&unhealthy),
            &now(),
        ));
        assert_eq!(health(&pool), ("False".into(), "RegistrationFailed".into()));
        // A restart knows nothing yet: the condition stands.
        pool.status = Some(nodepool_status(&pool, &[], Some(&class), None, &now()));
        assert_eq!(health(&pool).0, "False");
        pool.status = Some(nodepool_status(
            &pool,
            &[],
            Some(&class),
            Some(&Verdict::Healthy),
            &now(),
        ));
        assert_eq!(health(&pool).0, "True");
        // A new generation of the NodePool, or of its node class: unknown again.
        pool.metadata.generation = Some(3);
        pool.status = Some(nodepool_status(&pool, &[], Some(&class), None, &now()));
        assert_eq!(health(&pool).0, "Unknown");
        pool.status = Some(nodepool_status(
            &pool,
            &[],
            Some(&class),
            Some(&Verdict::Healthy),
            &now(),
        ));
        let mut newer = class.clone();
        newer.metadata.generation = Some(2);
        pool.status = Some(nodepool_status(&pool, &[], Some(&newer), None, &now()));
        assert_eq!(health(&pool).0, "Unknown");
    }

    #[test]
    fn transition_times_move_only_when_a_status_flips() {
        let mut class = class();
        class.status = Some(crate::api::EC2NodeClassStatus {
            conditions: simulated_nodeclass_conditions(&class, &now()),
            ..Default::default()
        });
        let later = Time(jiff::Timestamp::from_second(3600).unwrap());
        let mut wanted = simulated_nodeclass_conditions(&class, &later);
        wanted.push(Condition {
            type_: "AMIsReady".into(),
            status: "False".into(),
            reason: "AMINotFound".into(),
            message: String::new(),
            last_transition_time: later.clone(),
            observed_generation: Some(1),
        });
        let ready = wanted.iter_mut().find(|c| c.type_ == "Ready").unwrap();
        ready.status = "False".into();
        ready.last_transition_time = later.clone();
        keep_transition_times(&class, &mut wanted);
        let time_of = |t: &str| {
            wanted
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(time_of("ValidationSucceeded"), now(), "unchanged: kept");
        assert_eq!(time_of("Ready"), later, "flipped: moved");
        assert_eq!(time_of("AMIsReady"), later, "new: its own");
    }
}
