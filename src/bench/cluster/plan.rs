//! A case's scale-out as one pure round: the pods its first step creates, the bench's
//! NodePool over the embedded catalog, no nodes yet. What the controller plans for them
//! in the cluster bench, without the cluster: quick to run, and tested.

use std::collections::BTreeMap;

use anyhow::Context as _;
use karpenter_core::model::{Pod, Requirement, Requirements, ResourceName, Resources};
use karpenter_core::scheduling::{SchedulingInput, SchedulingResult};
use karpenter_core::vocab::{Operator, labels};

use super::cases::{Action, Case, Workload, scaled};

/// The first step's pods of `case` at `scale`, as one round over `region`'s catalog.
pub fn scale_out_input(case: Case, scale: f64, region: &str) -> anyhow::Result<SchedulingInput> {
    let step = case
        .steps()
        .into_iter()
        .next()
        .context("a case has steps")?;
    let Action::Create(workloads) = step.action else {
        anyhow::bail!("{case:?} does not start by creating Deployments");
    };
    let mut pods = Vec::new();
    for w in &workloads {
        pods.extend(workload_pods(w, scale)?);
    }
    let mut input = crate::bench::one_pool_input(crate::system::catalog_instance_types(region)?);
    let pool = input.nodepools.first_mut().context("one NodePool")?;
    pool.name = super::POOL.into();
    let mut requirements = Requirements::new();
    requirements.add(
        "karpenter.k8s.aws/instance-cpu",
        Requirement::new(Operator::Lt, &["32".to_owned()]),
    );
    requirements.add(labels::NODEPOOL, Requirement::is_in([super::POOL]));
    pool.requirements = requirements;
    input.pods = pods;
    Ok(input)
}

fn workload_pods(w: &Workload, scale: f64) -> anyhow::Result<Vec<Pod>> {
    let (requests, _) = Resources::from_quantities([("cpu", w.cpu), ("memory", w.memory)])
        .with_context(|| format!("{}'s requests", w.name))?;
    Ok((0..scaled(w.replicas, scale))
        .map(|i| {
            let mut pod = Pod::simple(
                &format!("{}-{i:05}", w.name),
                requests.get(ResourceName::Cpu),
                requests.get(ResourceName::Memory),
            );
            pod.labels = BTreeMap::from([("app".to_owned(), w.name.clone())]);
            pod.owner = Some(format!("ReplicaSet/{}", w.name));
            pod
        })
        .collect())
}

/// A plan's figures: NodeClaims, $/h, and the share of their cheapest types' allocatable
/// CPU and memory the pods request.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFigures {
    /// NodeClaims planned.
    pub nodes: usize,
    /// Their $/h at their cheapest options.
    pub price: f64,
    /// Requested CPU over allocatable.
    pub cpu: f64,
    /// Requested memory over allocatable.
    pub memory: f64,
    /// NodeClaims per cheapest instance type.
    pub types: BTreeMap<String, usize>,
}

/// `result`'s figures over `input`'s catalog.
pub fn plan_figures(input: &SchedulingInput, result: &SchedulingResult) -> PlanFigures {
    let catalog: BTreeMap<&str, Resources> = input
        .nodepools
        .iter()
        .flat_map(|p| &p.instance_types)
        .map(|t| (t.name.as_str(), t.allocatable()))
        .collect();
    let (mut requested, mut allocatable) = (Resources::ZERO, Resources::ZERO);
    let mut types = BTreeMap::new();
    for claim in &result.new_claims {
        let Some(first) = claim.instance_types.first() else {
            continue;
        };
        requested = requested.add(&claim.requests);
        if let Some(a) = catalog.get(first.name.as_str()) {
            allocatable = allocatable.add(a);
        }
        *types.entry(first.name.to_string()).or_insert(0) += 1;
    }
    let share = |r| requested.get(r) as f64 / allocatable.get(r).max(1) as f64;
    PlanFigures {
        nodes: result.new_claims.len(),
        price: result.new_capacity_cost(),
        cpu: share(ResourceName::Cpu),
        memory: share(ResourceName::Memory),
        types,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's `basic` gates (fewer than 200 nodes, reserved CPU over 85 % and memory
    /// over 75 %) hold for the round the controller plans for it: three 3800m/31Gi pods and
    /// four 950m/3900Mi ones share each 16-vCPU r-class node, which also costs less than one
    /// large pod per 4-vCPU memory-rich node and the small pods on nodes of their own.
    #[test]
    fn the_basic_case_packs_within_upstreams_gates() {
        let input = scale_out_input(Case::Basic, 1.0, "us-west-2").unwrap();
        assert_eq!(input.pods.len(), 1000);
        let result = karpenter_core::scheduling::solve(&input);
        assert!(
            result.unschedulable.is_empty(),
            "{:?}",
            result.unschedulable.first()
        );
        let f = plan_figures(&input, &result);
        assert!(f.nodes < 200, "{f:?}");
        assert!(f.cpu > 0.85 && f.memory > 0.75, "{f:?}");
        let bound = karpenter_core::scheduling::bound::cost_lower_bound(&input).unwrap();
        assert!(
            f.price < 1.15 * bound,
            "{f:?} against a bound of {bound:.2}"
        );
    }
}
