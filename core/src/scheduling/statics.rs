//! Static NodePools (`spec.replicas`, upstream's `StaticCapacity`) in a round: each keeps
//! `replicas` NodeClaims whatever pods need. A round launches what a static pool is short
//! of — `replicas` less every NodeClaim it has (deleting ones included, so a node on its
//! way out is replaced once it is gone), no further than `limits.nodes` allows — and plans
//! no pod onto those NodeClaims: pods use the nodes once they exist, as any node. Scale down
//! is disruption's ([`crate::disruption::statics`]).
//!
//! A static NodeClaim may launch as any instance type the pool's requirements allow, the
//! cheapest offering first, as upstream's static provisioner filters the pool's types by
//! its requirements alone. Reserved offerings are left to pods' NodeClaims: a reservation
//! is handed out per round by what its pods need, which a static NodeClaim has none of.

use ustr::Ustr;

use super::input::{NodePoolTemplate, SchedulingInput, StaticPool};
use super::output::{InstanceTypeOption, PlannedNodeClaim};
use crate::model::{CapacityType, Resources};

impl StaticPool {
    /// How many NodeClaims it is short of: `replicas` less those it has, no further than its
    /// node limit allows.
    pub fn shortfall(&self) -> i64 {
        let have = self.template.node_count;
        let wanted = self.replicas.saturating_sub(have);
        let room = self
            .template
            .limits
            .nodes
            .map_or(i64::MAX, |limit| limit.saturating_sub(have));
        wanted.min(room).max(0)
    }

    /// Whether its node limit keeps it below `replicas`.
    pub fn at_node_limit(&self) -> bool {
        self.template
            .limits
            .nodes
            .is_some_and(|limit| self.template.node_count >= limit)
            && self.template.node_count < self.replicas
    }
}

impl SchedulingInput {
    /// Every NodePool with its `replicas`: the dynamic ones (`None`), then the static ones.
    pub fn all_pools(&self) -> impl Iterator<Item = (&NodePoolTemplate, Option<i64>)> {
        (self.nodepools.iter().map(|p| (p, None))).chain(
            self.static_pools
                .iter()
                .map(|s| (&s.template, Some(s.replicas))),
        )
    }
}

/// A NodeClaim of `pool`'s template, without pods: its options are every instance type its
/// requirements allow at the cheapest such offering that is not reserved, cheapest first
/// (then by name). `None` when no type is offered.
pub fn template_claim(pool: &NodePoolTemplate) -> Option<PlannedNodeClaim> {
    let mut options: Vec<InstanceTypeOption> = pool
        .instance_types
        .iter()
        .filter(|it| it.requirements.compatible(&pool.requirements).is_ok())
        .filter_map(|it| {
            let offering = it
                .offerings_for(&pool.requirements)
                .filter(|o| o.capacity_type != CapacityType::Reserved)
                .min_by(|a, b| {
                    a.price
                        .total_cmp(&b.price)
                        .then_with(|| a.zone.cmp(&b.zone))
                })?;
            Some(InstanceTypeOption::at(Ustr::from(&it.name), offering))
        })
        .collect();
    InstanceTypeOption::cheapest_first(&mut options);
    (!options.is_empty()).then(|| PlannedNodeClaim {
        nodepool: pool.name.clone(),
        requirements: pool.requirements.clone(),
        instance_types: options,
        pods: Vec::new(),
        requests: Resources::ZERO,
        min_values_relaxed: false,
    })
}

/// The NodeClaims the static pools of `input` are short of, pool by pool in name order.
pub fn static_claims(input: &SchedulingInput) -> Vec<PlannedNodeClaim> {
    let mut pools: Vec<&StaticPool> = input.static_pools.iter().collect();
    pools.sort_by(|a, b| a.template.name.cmp(&b.template.name));
    let mut out = Vec::new();
    for pool in pools {
        let short = usize::try_from(pool.shortfall()).unwrap_or(0);
        if short == 0 {
            continue;
        }
        if let Some(claim) = template_claim(&pool.template) {
            out.extend(std::iter::repeat_n(claim, short));
        }
    }
    out
}
