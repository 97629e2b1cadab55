//! The round's requirement table: every requirement set seen, numbered, with their pairwise
//! merges and the instance types each allows per NodePool, priced and cheapest first, each
//! computed once; and the checks on a claim's launch options (limits, minValues).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::model::{InstanceType, Requirements, ResourceName, Resources};

use super::NodePoolTemplate;
use super::pools::PoolState;

/// An instance type a claim may launch as, priced under the claim's requirements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Priced {
    /// Position in the NodePool's catalog.
    pub(super) index: usize,
    /// USD/hour of its cheapest allowed offering.
    pub(super) price: f64,
    /// Position of that offering in the type's offerings.
    pub(super) offering: usize,
}

/// Instance types with their prices, cheapest first (ties by catalog position).
pub(super) type PricedTypes = Rc<[Priced]>;

/// Requirement sets seen this round, numbered, with their pairwise merges and the instance
/// types each allows per NodePool (cheapest first), each computed once: planned NodeClaims
/// and pods share few distinct sets, and re-deriving them per candidate claim dominated.
#[derive(Default, Clone)]
pub(super) struct RequirementTable {
    pub(super) sets: Vec<Requirements>,
    pub(super) ids: HashMap<Requirements, usize>,
    /// `(a, b)` → the id of `a ∩ b`, `None` when they conflict (`b` against template `a`).
    pub(super) merges: HashMap<(usize, usize), Option<usize>>,
    /// `(pool, set)` → the pool's launchable types compatible with the set, with the price of
    /// their cheapest allowed offering, cheapest first.
    pub(super) priced: HashMap<(usize, usize), PricedTypes>,
}

impl RequirementTable {
    pub(super) fn intern(&mut self, requirements: &Requirements) -> usize {
        if let Some(id) = self.ids.get(requirements) {
            return *id;
        }
        self.sets.push(requirements.clone());
        self.ids.insert(requirements.clone(), self.sets.len() - 1);
        self.sets.len() - 1
    }

    pub(super) fn get(&self, id: usize) -> &Requirements {
        &self.sets[id]
    }

    /// A claim's requirements (`current`) narrowed by a pod's (`alternative`).
    pub(super) fn merge(&mut self, current: usize, alternative: usize) -> Option<usize> {
        if let Some(merged) = self.merges.get(&(current, alternative)) {
            return *merged;
        }
        let (mine, theirs) = (&self.sets[current], &self.sets[alternative]);
        let merged = if mine.implies(theirs) {
            Some(current)
        } else if theirs.compatible_with_template(mine).is_err() {
            None
        } else {
            let mut merged = mine.clone();
            merged.intersect_with(theirs);
            Some(self.intern(&merged))
        };
        self.merges.insert((current, alternative), merged);
        merged
    }

    pub(super) fn priced_types(
        &mut self,
        pool: &NodePoolTemplate,
        pool_index: usize,
        state: &PoolState,
        set: usize,
    ) -> PricedTypes {
        if let Some(types) = self.priced.get(&(pool_index, set)) {
            return types.clone();
        }
        let requirements = &self.sets[set];
        let mut priced: Vec<Priced> = state
            .types
            .iter()
            .filter_map(|&index| {
                let it = &pool.instance_types[index];
                if it.requirements.compatible(requirements).is_err() {
                    return None;
                }
                let cheapest = it.cheapest_offering(requirements)?;
                let offering = it
                    .offerings
                    .iter()
                    .position(|o| std::ptr::eq(o, cheapest))?;
                Some(Priced {
                    index,
                    price: cheapest.price,
                    offering,
                })
            })
            .collect();
        priced.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.index.cmp(&b.index)));
        let priced: PricedTypes = priced.into();
        self.priced.insert((pool_index, set), priced.clone());
        priced
    }
}

/// The types of `priced` a claim may launch as: with room for `requests` within the pool's
/// limit headroom (crediting what the claim reserves already), exotic ones only if allowed.
pub(super) fn fitting_types(
    pool: &NodePoolTemplate,
    state: &PoolState,
    priced: &[Priced],
    exotic_ok: bool,
    requests: &Resources,
    credit: &Resources,
) -> Vec<Priced> {
    priced
        .iter()
        .filter(|t| {
            (exotic_ok || !state.exotic[t.index])
                && requests.fits_in(&state.allocatable[t.index])
                && within_headroom(
                    &pool.instance_types[t.index].capacity,
                    &state.headroom,
                    credit,
                )
        })
        .copied()
        .collect()
}

/// The largest amount of each resource among `resources`.
pub(super) fn elementwise_max(resources: impl Iterator<Item = Resources>) -> Resources {
    resources.fold(Resources::ZERO, |acc, r| acc.max(&r))
}

/// Whether a node of `capacity` stays within the pool's limit `headroom` per resource,
/// `credit` being what the claim reserves already.
pub(super) fn within_headroom(
    capacity: &Resources,
    headroom: &[Option<i64>],
    credit: &Resources,
) -> bool {
    ResourceName::ALL
        .into_iter()
        .all(|r| headroom[r as usize].is_none_or(|h| capacity.get(r) <= h + credit.get(r)))
}

/// Whether `types` keep the distinct values each requirement's minValues asks for; the
/// first that falls short says so.
pub(super) fn min_values_met(
    types: &[Priced],
    all: &[Arc<InstanceType>],
    requirements: &Requirements,
) -> Result<(), crate::model::requirements::MinValuesNotMet> {
    requirements.min_values_met(types.iter().map(|t| &all[t.index].labels))
}

/// Prices closer than this are equal (rounding of summed prices).
pub(super) const PRICE_EPSILON: f64 = 1e-9;
