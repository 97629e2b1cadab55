//! Shrinking a planned NodeClaim one price step by moving its fewest pods that keep it there
//! to claims that take them for free.

use crate::model::taints::untolerated;
use crate::model::{ResourceName, Resources};

use super::super::claims::cheaper_target;
use super::super::table::{Priced, RequirementTable, min_values_met};
use super::super::topology;
use super::{Improve, Moves};

impl Improve<'_> {
    /// One shrink step of claim `index`; whether it happened. `live` is the number of claims
    /// with pods.
    pub(super) fn shrink_once(&mut self, index: usize, live: usize) -> bool {
        let Some(chosen) = self.pods_to_shed(index, live) else {
            return false;
        };
        let mut done: Vec<(usize, usize)> = Vec::new();
        for &pod in &chosen {
            let target = {
                let (moves, table) = self.split();
                moves
                    .claims
                    .with_room(&moves.input.pods[pod].requests)
                    .find(|&to| {
                        to != index
                            && moves.joins_free(table, index, to, pod)
                            && moves.may_join(pod, to)
                    })
            };
            let Some(to) = target else {
                for &(pod, to) in done.iter().rev() {
                    self.move_pod(pod, to, index);
                }
                return false;
            };
            self.move_pod(pod, index, to);
            done.push((pod, to));
        }
        true
    }

    /// The pods of claim `index` to move so it launches one price step cheaper (or, with
    /// no cheaper type, all of them): the smallest single pod covering the excess, else the
    /// largest ones until covered; `None` when its movable pods cannot cover it.
    fn pods_to_shed(&mut self, index: usize, live: usize) -> Option<Vec<usize>> {
        let (moves, table) = self.split();
        let Moves {
            input,
            pool_states,
            claims,
            topology,
            rules,
        } = moves;
        let claim = &claims.all[index];
        if claim.pods.is_empty() {
            return None;
        }
        // A pod kept apart from a pod on every other claim has nowhere to go.
        let stuck = |p: usize| {
            rules[p]
                .as_ref()
                .is_none_or(|r| r.anti.iter().any(|g| topology.occupied_claims(*g) >= live))
        };
        let pool_index = claim.pool;
        let pool = &input.nodepools[pool_index];
        let state = &pool_states[pool_index];
        // What must leave: the excess over the cheaper type, or everything but the
        // daemonsets.
        let excess = match cheaper_target(pool, claim, table, state) {
            Some(target) => claim.requests.sub(&state.allocatable[target]),
            None => claim.requests.sub(&state.daemon),
        }
        .max(&Resources::ZERO);
        let mut movable: Vec<usize> = claim.pods.iter().copied().filter(|&p| !stuck(p)).collect();
        let size = |p: usize| {
            let r = &input.pods[p].requests;
            (r.get(ResourceName::Cpu), r.get(ResourceName::Memory), p)
        };
        movable.sort_by_key(|&p| size(p));
        if let Some(&p) = movable
            .iter()
            .find(|&&p| excess.fits_in(&input.pods[p].requests))
        {
            return Some(vec![p]);
        }
        let mut taken = Vec::new();
        let mut freed = Resources::ZERO;
        for &p in movable.iter().rev() {
            if excess.fits_in(&freed) {
                break;
            }
            freed = freed.add(&input.pods[p].requests);
            taken.push(p);
        }
        excess.fits_in(&freed).then_some(taken)
    }
}

impl Moves<'_> {
    /// Whether claim `to` takes `pod` from claim `from` at its current price, with
    /// requirements implying the source's, in the same zone and capacity type unless the pod
    /// is zone-free.
    fn joins_free(&self, table: &mut RequirementTable, from: usize, to: usize, pod: usize) -> bool {
        let Moves {
            input,
            pool_states,
            claims,
            topology,
            rules,
        } = *self;
        let (source, target) = (&claims.all[from], &claims.all[to]);
        let zone_free = rules[pod].as_ref().is_some_and(|r| r.zone_free);
        if target.pods.is_empty()
            || untolerated(
                &input.nodepools[target.pool].taints,
                &input.pods[pod].tolerations,
            )
            .is_some()
            || table.merge(target.requirements, source.requirements) != Some(target.requirements)
        {
            return false;
        }
        if !zone_free {
            let (a, b) = (
                table.get(source.requirements),
                table.get(target.requirements),
            );
            for key in topology.domain_keys() {
                if topology::claim_domain(a, from, key) != topology::claim_domain(b, to, key) {
                    return false;
                }
            }
        }
        let state = &pool_states[target.pool];
        let Some(cheapest) = target.types.first() else {
            return false;
        };
        let requests = target.requests.add(&input.pods[pod].requests);
        if !requests.fits_in(&state.allocatable[cheapest.index]) {
            return false;
        }
        let requirements = table.get(target.requirements);
        if !target.min_values_relaxed && requirements.iter().any(|(_, r)| r.min_values.is_some()) {
            let pool = &input.nodepools[target.pool];
            let kept: Vec<Priced> = target
                .types
                .iter()
                .filter(|t| requests.fits_in(&state.allocatable[t.index]))
                .copied()
                .collect();
            return min_values_met(&kept, &pool.instance_types, requirements).is_ok();
        }
        true
    }
}
