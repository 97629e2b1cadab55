//! A lower bound on what a round's new capacity must cost: the linear-programming relaxation
//! of buying (fractional) nodes whose allocatable, after each pool's daemonset overhead,
//! covers the pending pods' summed requests beyond what existing nodes have spare, with at
//! least as many nodes as the largest group of pods that must each have a node of their own
//! (required hostname anti-affinity that the pods' own labels match).
//!
//! Rounding cuts tighten it: pods whose request of a resource is a whole multiple of some
//! unit fill a node only in whole units, so each node type holds at most its allocatable
//! rounded down to the unit of them (with 2 GiB pods on 2·n GiB types less a few MiB
//! reserved, every node loses 2 GiB the plain relaxation would count).
//!
//! Every feasible plan satisfies these constraints, so no plan costs less; the bound ignores
//! zones, requirements, taints and limits, so it can sit below the best achievable plan. A
//! second bound is taken when larger: pods kept apart each need a node, so they cost at least
//! the sum of the cheapest type each fits on (when there are no existing nodes to use).

use std::collections::HashMap;

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use super::topology::CountKey;
use super::{PreferencePolicy, SchedulingInput};
use crate::model::{ResourceName, Resources};
use crate::vocab::labels;

/// Why no bound could be computed.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    /// No NodePool can launch anything, so no plan exists to bound.
    #[error("no NodePool has a launchable instance type")]
    NoInstanceTypes,
    /// The solver failed (infeasible means the pods' summed requests exceed any mix of
    /// launchable types, e.g. a resource no type provides).
    #[error("the relaxation has no solution: {0}")]
    Solver(#[from] microlp::Error),
}

/// Units the program works in, so its coefficients stay within a few orders of magnitude.
fn scale(resource: ResourceName) -> f64 {
    match resource {
        ResourceName::Cpu => 1e-3,
        _ if resource.is_bytes() => 1.0 / (1u64 << 30) as f64,
        _ => 1.0,
    }
}

/// The least number of nodes the pods need: the largest set of pods that a required hostname
/// anti-affinity term keeps apart from each other (every pod of the set carries the term and
/// matches its selector). With preferences respected and no NodePool capped in nodes,
/// preferred hostname anti-affinity counts too: a new node always satisfies it, so the
/// scheduler never relaxes it.
pub fn forced_nodes(input: &SchedulingInput) -> usize {
    largest_group(input, &kept_apart(input))
}

fn largest_group(input: &SchedulingInput, groups: &HashMap<CountKey, Vec<usize>>) -> usize {
    groups
        .values()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(usize::from(!input.pods.is_empty()))
}

/// The groups of pods that must each have a node of their own (see [`forced_nodes`]), by
/// the anti-affinity term that keeps them apart.
fn kept_apart(input: &SchedulingInput) -> HashMap<CountKey, Vec<usize>> {
    let honoured = input.preference_policy == PreferencePolicy::Respect
        && input.nodepools.iter().all(|p| p.limits.nodes.is_none());
    let mut groups: HashMap<CountKey, Vec<usize>> = HashMap::new();
    for (index, pod) in input.pods.iter().enumerate() {
        let preferred = pod
            .preferred_pod_affinity
            .iter()
            .map(|(_, t)| t)
            .filter(|_| honoured);
        for term in pod.pod_affinity.iter().chain(preferred) {
            let key = CountKey::affinity(term, &pod.namespace);
            if term.anti
                && term.topology_key == labels::HOSTNAME
                && key.matches(&pod.namespace, &pod.labels)
            {
                groups.entry(key).or_default().push(index);
            }
        }
    }
    groups
}

/// The least any plan pays for a group of pods kept apart: each on a node of its own, so at
/// least the cheapest launchable type (`columns`: usable allocatable and price) that holds it.
fn apart_cost(input: &SchedulingInput, pods: &[usize], columns: &[(Resources, f64)]) -> f64 {
    pods.iter()
        .map(|&p| {
            columns
                .iter()
                .filter(|(usable, _)| input.pods[p].requests.fits_in(usable))
                .map(|(_, price)| *price)
                .min_by(f64::total_cmp)
                .unwrap_or(0.0)
        })
        .sum()
}

/// Rounding cuts added per resource (the strongest, see [`rounding_cuts`]): each is a row
/// of the program, and a round rarely has more request values that matter.
const CUTS_PER_RESOURCE: usize = 8;

/// A valid inequality the plain relaxation misses: pods whose request of `resource` is a
/// whole multiple of `unit` fill a node only in whole units, so a node whose allocatable is
/// `a` holds at most `unit·⌊a/unit⌋` of them, and the nodes bought must hold `requested`.
/// (With 2 GiB pods and types of 2·n GiB less a few MiB reserved, each node loses a unit.)
#[derive(Debug, Clone, Copy, PartialEq)]
struct RoundingCut {
    resource: ResourceName,
    unit: i64,
    /// Summed requests of the pods whose request is a multiple of `unit`.
    requested: i64,
}

impl RoundingCut {
    /// What a node with `allocatable` of the resource can hold of those pods.
    fn held(&self, allocatable: i64) -> i64 {
        allocatable.max(0) / self.unit * self.unit
    }
}

/// For CPU and memory, a cut per distinct request value, keeping the strongest alone against
/// the launchable types (`columns`: usable allocatable and price).
fn rounding_cuts(input: &SchedulingInput, columns: &[(Resources, f64)]) -> Vec<RoundingCut> {
    let mut cuts = Vec::new();
    for resource in [ResourceName::Cpu, ResourceName::Memory] {
        let mut requests: Vec<i64> = input
            .pods
            .iter()
            .map(|p| p.requests.get(resource))
            .filter(|r| *r > 0)
            .collect();
        requests.sort_unstable();
        let mut units = requests.clone();
        units.dedup();
        let candidates: Vec<RoundingCut> = units
            .into_iter()
            .map(|unit| RoundingCut {
                resource,
                unit,
                requested: requests.iter().filter(|r| *r % unit == 0).sum(),
            })
            .collect();
        // Strongest alone first: what buying the held capacity alone would cost at least.
        let alone = |cut: &RoundingCut| {
            columns
                .iter()
                .map(|(usable, price)| (cut.held(usable.get(resource)), price))
                .filter(|(held, _)| *held > 0)
                .map(|(held, price)| price / held as f64)
                .min_by(f64::total_cmp)
                .map_or(0.0, |per_unit| per_unit * cut.requested as f64)
        };
        let mut scored: Vec<(f64, RoundingCut)> =
            candidates.into_iter().map(|c| (alone(&c), c)).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.unit.cmp(&b.1.unit)));
        cuts.extend(scored.into_iter().take(CUTS_PER_RESOURCE).map(|(_, c)| c));
    }
    cuts
}

/// The least $/h of new capacity any plan for `input` can have.
pub fn cost_lower_bound(input: &SchedulingInput) -> Result<f64, BoundError> {
    lower_bound(input, true)
}

/// The same bound without rounding cuts: the plain relaxation, reported beside it so plans
/// can be compared with figures quoted against it.
pub fn relaxation_lower_bound(input: &SchedulingInput) -> Result<f64, BoundError> {
    lower_bound(input, false)
}

fn lower_bound(input: &SchedulingInput, with_cuts: bool) -> Result<f64, BoundError> {
    let input = &*super::canonical(input);
    let demand = input
        .pods
        .iter()
        .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
    let spare = input.existing.iter().fold(Resources::ZERO, |acc, n| {
        let free = n.allocatable.sub(&n.requested);
        acc.add(&free.max(&Resources::ZERO))
    });
    let apart = kept_apart(input);
    let nodes_needed = largest_group(input, &apart).saturating_sub(input.existing.len());

    let mut problem = Problem::new(OptimizationDirection::Minimize);
    // Per variable: its allocatable after daemonsets, and its price.
    let mut columns = Vec::new();
    for pool in &input.nodepools {
        let daemons = super::pools::PoolDaemons::of(pool, &input.daemonsets);
        for it in &pool.instance_types {
            if it.requirements.compatible(&pool.requirements).is_err() {
                continue;
            }
            let Some(offering) = it.cheapest_offering(&pool.requirements) else {
                continue;
            };
            let variable = problem.add_var(offering.price, (0.0, f64::INFINITY));
            let usable = it
                .allocatable()
                .sub(&daemons.requests_on(it))
                .max(&Resources::ZERO);
            columns.push((variable, usable, offering.price));
        }
    }
    if columns.is_empty() {
        return Err(BoundError::NoInstanceTypes);
    }
    for resource in ResourceName::ALL {
        let needed = demand.get(resource) - spare.get(resource);
        if needed <= 0 {
            continue;
        }
        let terms: Vec<_> = columns
            .iter()
            .filter(|(_, usable, _)| usable.get(resource) > 0)
            .map(|(v, usable, _)| (*v, usable.get(resource) as f64 * scale(resource)))
            .collect();
        problem.add_constraint(
            terms.as_slice(),
            ComparisonOp::Ge,
            needed as f64 * scale(resource),
        );
    }
    let launchable: Vec<(Resources, f64)> = columns
        .iter()
        .map(|(_, usable, price)| (*usable, *price))
        .collect();
    let cuts = match with_cuts {
        true => rounding_cuts(input, &launchable),
        false => Vec::new(),
    };
    for cut in cuts {
        let existing: i64 = input
            .existing
            .iter()
            .map(|n| {
                let free = n.allocatable.sub(&n.requested).get(cut.resource).max(0);
                cut.held(free)
            })
            .sum();
        let needed = cut.requested - existing;
        if needed <= 0 {
            continue;
        }
        let terms: Vec<_> = columns
            .iter()
            .map(|(v, usable, _)| (*v, cut.held(usable.get(cut.resource))))
            .filter(|(_, held)| *held > 0)
            .map(|(v, held)| (v, held as f64 * scale(cut.resource)))
            .collect();
        // No type holds a single unit: those pods fit no new node, which the plain rows
        // already answer for.
        if terms.is_empty() {
            continue;
        }
        problem.add_constraint(
            terms.as_slice(),
            ComparisonOp::Ge,
            needed as f64 * scale(cut.resource),
        );
    }
    if nodes_needed > 0 {
        let terms: Vec<_> = columns.iter().map(|(v, _, _)| (*v, 1.0)).collect();
        problem.add_constraint(terms.as_slice(), ComparisonOp::Ge, nodes_needed as f64);
    }
    let solution = problem.solve()?.into_solution().map_err(|interrupted| {
        BoundError::Solver(microlp::Error::InternalError(format!(
            "stopped early: {:?}",
            interrupted.termination_reason()
        )))
    })?;
    // A second valid bound the relaxation misses: pods kept apart each pay for a node.
    let apart = apart
        .values()
        .filter(|_| input.existing.is_empty())
        .map(|pods| apart_cost(input, pods, &launchable))
        .fold(0.0, f64::max);
    Ok(solution.objective().max(apart))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::*;
    use crate::model::instance_type::{CapacityType, Offering};
    use crate::model::pod::PodAffinityTerm;
    use crate::model::{InstanceType, Pod, Requirements};
    use crate::scheduling::{Limits, NodePoolTemplate};

    const GIB: i64 = 1 << 30;

    /// `size` vCPU, 2·`size` GiB, no overhead, $1 per vCPU-hour.
    fn linear(size: i64) -> Arc<InstanceType> {
        Arc::new(InstanceType::new(
            format!("t{size}"),
            [(labels::INSTANCE_TYPE.to_owned(), format!("t{size}"))].into(),
            Resources::cpu_memory(size * 1000, 2 * size * GIB).with(ResourceName::Pods, 100),
            Resources::ZERO,
            vec![Offering::new(
                "a",
                CapacityType::OnDemand,
                size as f64,
                true,
            )],
        ))
    }

    fn input(pods: Vec<Pod>) -> SchedulingInput {
        SchedulingInput {
            pods,
            nodepools: vec![NodePoolTemplate {
                name: "default".into(),
                weight: 0,
                requirements: Requirements::new(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
                instance_types: (1..=8).map(linear).collect(),
                limits: Limits::default(),
                usage: Resources::ZERO,
                node_count: 0,
            }],
            existing: Vec::new(),
            daemonsets: Vec::new(),
            ..Default::default()
        }
    }

    #[test]
    fn the_dominant_resource_sets_the_bound() {
        // 3.5 vCPU and 3 GiB: CPU dominates, and capacity is bought fractionally.
        let pods = (0..7)
            .map(|i| Pod::simple(&format!("p{i}"), 500, 3 * GIB / 7))
            .collect();
        let bound = cost_lower_bound(&input(pods)).unwrap();
        assert!((bound - 3.5).abs() < 1e-6, "{bound}");
    }

    #[test]
    fn pods_kept_apart_force_whole_nodes() {
        let pods: Vec<Pod> = (0..4)
            .map(|i| {
                let mut p = Pod::simple(&format!("p{i}"), 100, GIB / 10);
                p.labels.insert("app".into(), "web".into());
                p.pod_affinity.push(PodAffinityTerm {
                    topology_key: labels::HOSTNAME.into(),
                    selector: [("app".to_owned(), "web".to_owned())].into(),
                    namespaces: Vec::new(),
                    expressions: Vec::new(),
                    all_namespaces: false,
                    namespace_selector: None,
                    anti: true,
                });
                p
            })
            .collect();
        let round = input(pods);
        assert_eq!(forced_nodes(&round), 4);
        // Four nodes of the smallest type, though 0.4 vCPU would do otherwise.
        let bound = cost_lower_bound(&round).unwrap();
        assert!((bound - 4.0).abs() < 1e-6, "{bound}");
    }

    /// `size` vCPU and 2·`size` GiB less 100m and 10 MiB reserved, $1 per vCPU-hour.
    fn reserved(size: i64) -> Arc<InstanceType> {
        let plain = linear(size);
        Arc::new(InstanceType::new(
            plain.name.clone(),
            plain.labels.clone(),
            plain.capacity,
            Resources::cpu_memory(100, 10 << 20),
            plain.offerings.clone(),
        ))
    }

    fn reserved_input(pods: Vec<Pod>) -> SchedulingInput {
        let mut round = input(pods);
        round.nodepools[0].instance_types = (1..=8).map(reserved).collect();
        round
    }

    #[test]
    fn pods_in_whole_units_lose_the_unit_reserved_capacity_breaks() {
        // Four 2 GiB pods: 8 GiB in all, but a 2·n GiB type less 10 MiB holds n - 1 of them,
        // so one node needs 5 vCPU and two need 3 + 2 = 5 vCPU; the plain relaxation buys
        // 4.02 vCPU of memory.
        let pods = (0..4)
            .map(|i| Pod::simple(&format!("p{i}"), 100, 2 * GIB))
            .collect();
        let round = reserved_input(pods);
        let cuts = rounding_cuts(&round, &[(reserved(1).allocatable(), 1.0)]);
        assert!(cuts.contains(&RoundingCut {
            resource: ResourceName::Memory,
            unit: 2 * GIB,
            requested: 8 * GIB,
        }));
        let bound = cost_lower_bound(&round).unwrap();
        assert!((bound - 5.0).abs() < 1e-6, "{bound}");
    }

    /// The cheapest plan for a few pods by trying every way to group them onto nodes (each
    /// group on the cheapest type that holds it); `None` if some group fits no type.
    fn cheapest_plan(pods: &[Pod], types: &[Arc<InstanceType>]) -> Option<f64> {
        fn extend(
            pods: &[Pod],
            types: &[Arc<InstanceType>],
            groups: &mut Vec<Resources>,
            next: usize,
        ) -> Option<f64> {
            let Some(pod) = pods.get(next) else {
                return groups
                    .iter()
                    .map(|g| {
                        types
                            .iter()
                            .filter(|t| g.fits_in(&t.allocatable()))
                            .map(|t| t.offerings[0].price)
                            .min_by(f64::total_cmp)
                    })
                    .sum();
            };
            let mut best: Option<f64> = None;
            for g in 0..=groups.len() {
                if g == groups.len() {
                    groups.push(pod.requests);
                } else {
                    groups[g] = groups[g].add(&pod.requests);
                }
                if let Some(cost) = extend(pods, types, groups, next + 1) {
                    best = Some(best.map_or(cost, |b: f64| b.min(cost)));
                }
                if g == groups.len() - 1 && groups[g] == pod.requests {
                    groups.pop();
                } else {
                    groups[g] = groups[g].sub(&pod.requests);
                }
            }
            best
        }
        extend(pods, types, &mut Vec::new(), 0)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// No plan costs less than the bound, rounding cuts included: checked against the
        /// cheapest of all groupings of up to six pods with the benchmark's request values.
        #[test]
        fn no_plan_costs_less_than_the_bound(
            specs in proptest::collection::vec((0usize..5, 0usize..6), 1..7)
        ) {
            const CPU: [i64; 5] = [100, 250, 500, 1000, 1500];
            const MEM_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
            let pods: Vec<Pod> = specs
                .iter()
                .enumerate()
                .map(|(i, (c, m))| Pod::simple(&format!("p{i}"), CPU[*c], MEM_MIB[*m] << 20))
                .collect();
            let round = reserved_input(pods.clone());
            let bound = cost_lower_bound(&round).unwrap();
            let best = cheapest_plan(&pods, &round.nodepools[0].instance_types).unwrap();
            proptest::prop_assert!(bound <= best + 1e-6, "bound {} above a plan of {}", bound, best);
        }
    }

    #[test]
    fn a_resource_no_type_has_is_an_error() {
        let mut pod = Pod::simple("gpu", 100, GIB);
        pod.requests.set(ResourceName::NvidiaGpu, 1);
        assert!(matches!(
            cost_lower_bound(&input(vec![pod])),
            Err(BoundError::Solver(_))
        ));
    }
}
