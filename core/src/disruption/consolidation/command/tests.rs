#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use super::*;
use crate::disruption::test_support::{node, pod, snapshot};
use crate::model::instance_type::{Offering, overhead};
use crate::model::{KubeletSettings, Requirements, ResourceName, Resources};
use crate::ports::OfferingKey;
use crate::scheduling::{Limits, NodePoolTemplate};

const FAMILY: &str = "karpenter.k8s.aws/instance-family";

/// A type of family `family` with an on-demand offering and, if `spot` says, a spot one.
fn typed(name: &str, family: &str, on_demand: f64, spot: Option<f64>) -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(2000, 8 << 30).with(ResourceName::Pods, 110);
    let mut offerings = vec![Offering::new("a", CapacityType::OnDemand, on_demand, true)];
    if let Some(price) = spot {
        offerings.push(Offering::new("b", CapacityType::Spot, price, true));
    }
    Arc::new(InstanceType::new(
        name,
        [
            (labels::INSTANCE_TYPE.to_owned(), name.to_owned()),
            (FAMILY.to_owned(), family.to_owned()),
        ]
        .into(),
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        offerings,
    ))
}

fn base(types: &[Arc<InstanceType>]) -> SchedulingInput {
    SchedulingInput {
        nodepools: vec![NodePoolTemplate {
            name: "default".into(),
            weight: 0,
            requirements: Requirements::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            instance_types: types.to_vec(),
            limits: Limits::default(),
            usage: Resources::ZERO,
            node_count: 0,
        }],
        ..Default::default()
    }
}

/// The replacement a simulation would plan under `requirements`: every type, each at its
/// cheapest offering those requirements allow, cheapest first.
fn planned(types: &[Arc<InstanceType>], requirements: Requirements) -> PlannedNodeClaim {
    let mut options: Vec<InstanceTypeOption> = types
        .iter()
        .filter_map(|t| {
            let o = t.cheapest_offering(&requirements)?;
            Some(InstanceTypeOption {
                name: t.name.as_str().into(),
                price: o.price,
                zone: o.zone.as_str().into(),
                capacity_type: o.capacity_type,
            })
        })
        .collect();
    options.sort_by(|a, b| a.price.total_cmp(&b.price));
    PlannedNodeClaim {
        nodepool: "default".into(),
        requirements,
        instance_types: options,
        pods: vec!["p".into()],
        requests: Resources::ZERO,
        min_values_relaxed: false,
    }
}

fn candidate(name: &str, instance_type: &str, ct: CapacityType, price: f64) -> NodeSnapshot {
    let mut n = node(name, "default", vec![pod(&format!("{name}-pod"), true)]);
    n.price = price;
    n.offering = Some(OfferingKey {
        instance_type: instance_type.into(),
        zone: "a".into(),
        capacity_type: ct,
    });
    n
}

fn fits(claims: Vec<PlannedNodeClaim>) -> Outcome {
    Outcome::Fits {
        replacements: claims,
    }
}

fn names(action: &Action) -> Vec<String> {
    match action {
        Action::Replace(claim) => claim
            .instance_types
            .iter()
            .map(|o| o.name.to_string())
            .collect(),
        Action::Delete => Vec::new(),
    }
}

const OFF: Settings = Settings {
    spot_to_spot: false,
};
const ON: Settings = Settings { spot_to_spot: true };

#[test]
fn only_known_nodes_of_underutilized_pools_past_consolidate_after_with_pods_are_eligible() {
    let yes = Some(Consolidatable::Yes);
    let n = candidate("a", "m5.large", CapacityType::OnDemand, 0.1);
    let s = snapshot(vec![n.clone()]);
    assert_eq!(eligible(&s, &n, yes), Ok(()));
    assert_eq!(
        eligible(&s, &n, Some(Consolidatable::No)),
        Err(NotEligible::NotConsolidatable)
    );
    assert_eq!(eligible(&s, &n, None), Err(NotEligible::NotConsolidatable));

    let mut unknown = n.clone();
    unknown.offering = None;
    assert_eq!(
        eligible(&s, &unknown, yes),
        Err(NotEligible::UnknownOffering)
    );

    let mut empty = n.clone();
    empty.pods[0].reschedulable = false;
    assert_eq!(eligible(&s, &empty, yes), Err(NotEligible::Empty));

    let mut when_empty = s.clone();
    when_empty.pools[0].policy = ConsolidationPolicy::WhenEmpty;
    assert_eq!(
        eligible(&when_empty, &n, yes),
        Err(NotEligible::WhenEmpty("default".into()))
    );
    // A Balanced pool's nodes are candidates; their moves are scored.
    let mut balanced = s.clone();
    balanced.pools[0].policy = ConsolidationPolicy::Balanced;
    assert_eq!(eligible(&balanced, &n, yes), Ok(()));
    let mut never = s.clone();
    never.pools[0].consolidate_after = None;
    assert_eq!(
        eligible(&never, &n, yes),
        Err(NotEligible::Never("default".into()))
    );
    let mut gone = s.clone();
    gone.pools.clear();
    assert_eq!(
        eligible(&gone, &n, yes),
        Err(NotEligible::NoPool("default".into()))
    );
}

#[test]
fn pods_that_fit_delete_pods_that_do_not_block_and_two_new_nodes_are_no_consolidation() {
    let types = [typed("m5.large", "m5", 0.1, None)];
    let a = candidate("a", "m5.large", CapacityType::OnDemand, 0.1);
    let b = candidate("b", "m5.large", CapacityType::OnDemand, 0.1);
    let both = [&a, &b];
    let deleted = decide(&both, fits(Vec::new()), &base(&types), OFF).unwrap();
    assert_eq!(deleted.action, Action::Delete);
    assert!((deleted.savings - 0.2).abs() < 1e-9);

    let blocked = decide(
        &both,
        Outcome::Blocked(vec![("default/a-pod".into(), "no room".into())]),
        &base(&types),
        OFF,
    );
    assert_eq!(
        blocked,
        Err(Unconsolidatable::PodsWouldNotSchedule {
            pod: "default/a-pod".into(),
            why: "no room".into()
        })
    );
    let two = vec![
        planned(&types, Requirements::new()),
        planned(&types, Requirements::new()),
    ];
    assert_eq!(
        decide(&both, fits(two), &base(&types), OFF),
        Err(Unconsolidatable::TooManyReplacements(2))
    );
}

#[test]
fn a_replacement_keeps_only_strictly_cheaper_types() {
    let types = [
        typed("small", "c5", 0.05, None),
        typed("same", "c5", 0.10, None),
        typed("dear", "c5", 0.30, None),
    ];
    let a = candidate("a", "m5.large", CapacityType::OnDemand, 0.10);
    let decided = decide(
        &[&a],
        fits(vec![planned(&types, Requirements::new())]),
        &base(&types),
        OFF,
    )
    .unwrap();
    assert_eq!(names(&decided.action), ["small"]);
    assert!((decided.savings - 0.05).abs() < 1e-9);

    let dear = candidate("d", "m5.large", CapacityType::OnDemand, 0.05);
    assert_eq!(
        decide(
            &[&dear],
            fits(vec![planned(&types, Requirements::new())]),
            &base(&types),
            OFF
        ),
        Err(Unconsolidatable::NotCheaper)
    );
}

#[test]
fn cheaper_types_too_few_for_min_values_are_no_replacement() {
    let types = [
        typed("c5.large", "c5", 0.05, None),
        typed("c6.large", "c6", 0.06, None),
        typed("m5.large", "m5", 0.20, None),
    ];
    let mut requirements = Requirements::new();
    let mut families = Requirement::exists();
    families.min_values = Some(3);
    requirements.add(FAMILY, families);
    let a = candidate("a", "m5.large", CapacityType::OnDemand, 0.10);
    let decided = decide(
        &[&a],
        fits(vec![planned(&types, requirements.clone())]),
        &base(&types),
        OFF,
    );
    assert!(
        matches!(&decided, Err(Unconsolidatable::MinValues(m)) if m.contains("minValues 3")),
        "{decided:?}"
    );
    let dearer = candidate("a", "m5.xlarge", CapacityType::OnDemand, 0.40);
    let decided = decide(
        &[&dearer],
        fits(vec![planned(&types, requirements)]),
        &base(&types),
        OFF,
    )
    .unwrap();
    assert_eq!(names(&decided.action).len(), 3);
}

#[test]
fn on_demand_replaced_by_either_is_pinned_to_spot_and_priced_as_spot() {
    let types = [
        typed("spotty", "c5", 0.08, Some(0.03)),
        typed("od-only", "c5", 0.06, None),
        typed("dear", "c5", 0.50, Some(0.20)),
    ];
    let a = candidate("a", "m5.large", CapacityType::OnDemand, 0.10);
    let decided = decide(
        &[&a],
        fits(vec![planned(&types, Requirements::new())]),
        &base(&types),
        OFF,
    )
    .unwrap();
    let Action::Replace(claim) = &decided.action else {
        panic!("{decided:?}")
    };
    assert_eq!(names(&decided.action), ["spotty"]);
    assert_eq!(claim.instance_types[0].capacity_type, CapacityType::Spot);
    assert_eq!(
        claim.requirements.get(labels::CAPACITY_TYPE),
        Some(&Requirement::is_in(["spot"]))
    );
    assert!((decided.savings - 0.07).abs() < 1e-9);

    // Held to on-demand by its pool: not pinned.
    let mut od = Requirements::new();
    od.add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
    let decided = decide(&[&a], fits(vec![planned(&types, od)]), &base(&types), OFF).unwrap();
    assert_eq!(names(&decided.action), ["od-only", "spotty"]);
}

#[test]
fn spot_to_spot_needs_the_gate_and_fifteen_cheaper_types_and_launches_the_cheapest_fifteen() {
    let many = |n: usize| -> Vec<Arc<InstanceType>> {
        (0..n)
            .map(|i| typed(&format!("t{i:02}"), "c5", 1.0, Some(0.01 * (i + 1) as f64)))
            .collect()
    };
    let a = candidate("a", "m5.large", CapacityType::Spot, 0.50);
    let spot_claim = |types: &[Arc<InstanceType>]| {
        let mut r = Requirements::new();
        r.add(labels::CAPACITY_TYPE, Requirement::is_in(["spot"]));
        fits(vec![planned(types, r)])
    };
    let types = many(30);
    assert_eq!(
        decide(&[&a], spot_claim(&types), &base(&types), OFF),
        Err(Unconsolidatable::SpotToSpotDisabled)
    );
    let decided = decide(&[&a], spot_claim(&types), &base(&types), ON).unwrap();
    let kept = names(&decided.action);
    assert_eq!(kept.len(), SPOT_TO_SPOT_MIN_OPTIONS);
    assert_eq!(kept.first().map(String::as_str), Some("t00"));
    assert_eq!(kept.last().map(String::as_str), Some("t14"));

    let few = many(14);
    assert_eq!(
        decide(&[&a], spot_claim(&few), &base(&few), ON),
        Err(Unconsolidatable::TooFewSpotOptions(14))
    );
    // Several spot candidates need no fifteen.
    let b = candidate("b", "m5.large", CapacityType::Spot, 0.50);
    let decided = decide(&[&a, &b], spot_claim(&few), &base(&few), ON).unwrap();
    assert_eq!(names(&decided.action).len(), 14);
}

#[test]
fn several_candidates_are_not_replaced_by_their_own_type_at_their_price() {
    let types = [
        typed("m5.large", "m5", 0.10, None),
        typed("m5.xlarge", "m5", 0.19, None),
    ];
    let a = candidate("a", "m5.large", CapacityType::OnDemand, 0.10);
    let b = candidate("b", "m5.large", CapacityType::OnDemand, 0.10);
    assert_eq!(
        decide(
            &[&a, &b],
            fits(vec![planned(&types, Requirements::new())]),
            &base(&types),
            OFF
        ),
        Err(Unconsolidatable::NotCheaper)
    );
    // A big node and a small one of a type the replacement could be: cheaper than the big.
    let big = candidate("big", "m5.xlarge", CapacityType::OnDemand, 0.19);
    let decided = decide(
        &[&a, &big],
        fits(vec![planned(&types, Requirements::new())]),
        &base(&types),
        OFF,
    )
    .unwrap();
    assert_eq!(names(&decided.action), ["m5.large"]);
}
