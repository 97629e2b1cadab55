//! The round's requirement table: every requirement set seen, numbered, with their pairwise
//! merges and the instance types each allows per NodePool, priced and cheapest first, each
//! computed once; and the checks on a claim's launch options (limits, minValues).

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::FixedState;

use crate::model::{InstanceType, Requirements, Resources};

use super::NodePoolTemplate;
use super::pools::{PoolState, SMALL};
pub(super) use super::pools::{Priced, PricedTypes};

/// Requirement sets seen this round, numbered, with their pairwise merges and the instance
/// types each allows per NodePool (cheapest first), each computed once: planned NodeClaims
/// and pods share few distinct sets, and re-deriving them per candidate claim dominated.
#[derive(Default, Clone)]
pub(super) struct RequirementTable {
    pub(super) sets: Vec<Requirements>,
    /// Per set, whether some requirement asks for minValues.
    min_values: Vec<bool>,
    pub(super) ids: HashMap<Requirements, usize, FixedState>,
    /// `(a, b)` → the id of `a ∩ b`, `None` when they conflict (`b` against template `a`).
    pub(super) merges: HashMap<(usize, usize), Option<usize>, FixedState>,
    /// `(pool, set)` → the pool's launchable types compatible with the set, with the price of
    /// their cheapest allowed offering, cheapest first.
    pub(super) priced: HashMap<(usize, usize), PricedTypes, FixedState>,
    /// `(pool, set, exotic allowed, requests)` → the types a new claim with those requests
    /// may launch as, for pools without limits (with limits they change as claims are made).
    /// Pods share few shapes, and each pod that could open a claim prices one.
    fresh: HashMap<(usize, usize, bool, Resources), Arc<FreshTypes>, FixedState>,
}

/// The types a new claim may launch as, and their bounds (computed when first needed).
pub(super) struct FreshTypes {
    pub(super) types: Arc<[Priced]>,
    bounds: std::sync::OnceLock<TypeBounds>,
}

impl FreshTypes {
    /// The bounds of the types (`pool`'s, whose state `state` is).
    pub(super) fn bounds(&self, pool: &NodePoolTemplate, state: &PoolState) -> TypeBounds {
        *self
            .bounds
            .get_or_init(|| type_bounds(state, pool, &self.types))
    }
}

impl RequirementTable {
    pub(super) fn intern(&mut self, requirements: &Requirements) -> usize {
        if let Some(id) = self.ids.get(requirements) {
            return *id;
        }
        self.sets.push(requirements.clone());
        self.min_values
            .push(requirements.iter().any(|(_, r)| r.min_values.is_some()));
        self.ids.insert(requirements.clone(), self.sets.len() - 1);
        self.sets.len() - 1
    }

    pub(super) fn get(&self, id: usize) -> &Requirements {
        &self.sets[id]
    }

    /// Whether some requirement of set `id` asks for minValues.
    pub(super) fn has_min_values(&self, id: usize) -> bool {
        self.min_values[id]
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
        if let Some(types) = state.catalog.priced(requirements) {
            self.priced.insert((pool_index, set), types.clone());
            return types;
        }
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
        state.catalog.keep_priced(requirements, &priced);
        self.priced.insert((pool_index, set), priced.clone());
        priced
    }
}

impl RequirementTable {
    /// The types a new claim of `pool` under requirement set `set` with `requests` may launch
    /// as ([`fitting_types`] of its priced types, nothing credited).
    pub(super) fn fresh_types(
        &mut self,
        pool: &NodePoolTemplate,
        pool_index: usize,
        state: &PoolState,
        set: usize,
        exotic_ok: bool,
        requests: &Resources,
    ) -> Arc<FreshTypes> {
        let unlimited = state.unlimited();
        let key = (pool_index, set, exotic_ok, *requests);
        if unlimited && let Some(types) = self.fresh.get(&key) {
            return types.clone();
        }
        let priced = self.priced_types(pool, pool_index, state, set);
        let types = Arc::new(FreshTypes {
            types: fitting_types(pool, state, &priced, exotic_ok, requests, &Resources::ZERO)
                .into(),
            bounds: std::sync::OnceLock::new(),
        });
        if unlimited {
            self.fresh.insert(key, types.clone());
        }
        types
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
    let unlimited = state.unlimited();
    let fit = GrownFit::new(&Resources::ZERO, requests);
    let mut types = Vec::with_capacity(priced.len());
    types.extend(
        priced
            .iter()
            .filter(|t| {
                (exotic_ok || !state.exotic[t.index])
                    && fit.fits_fully(state, t.index)
                    && (unlimited
                        || state.within_headroom(&pool.instance_types[t.index].capacity, credit))
            })
            .copied(),
    );
    types
}

/// Whether a type that held a claim's requests still holds them after a pod joins. Placing
/// a pod passes over hundreds of types, so when the pod and the types have nothing but the
/// [`SMALL`] resources, only those are compared.
pub(super) struct GrownFit {
    /// The claim's requests with the pod's.
    pub(super) requests: Resources,
    /// The grown requests of the [`SMALL`] resources, when the pod asks for no other.
    small: Option<[i64; SMALL]>,
    /// Whether the grown requests have none of the other resources.
    nothing_else: bool,
}

impl GrownFit {
    /// `before` (which every type checked holds) grown by `added`.
    pub(super) fn new(before: &Resources, added: &Resources) -> Self {
        let requests = before.add(added);
        let small = added.0[SMALL..]
            .iter()
            .all(|v| *v == 0)
            .then(|| std::array::from_fn(|r| requests.0[r]));
        GrownFit {
            nothing_else: requests.0[SMALL..].iter().all(|v| *v <= 0),
            requests,
            small,
        }
    }

    /// Whether type `index` of the pool whose state is `state`, which held `before`, holds
    /// the grown requests (the other resources are as they were).
    #[inline]
    pub(super) fn fits(&self, state: &PoolState, index: usize) -> bool {
        match &self.small {
            Some(small) => fits_small(small, &state.small[index].allocatable),
            None => self.requests.fits_in(&state.allocatable[index]),
        }
    }

    /// Whether type `index` holds the grown requests, whatever it held before.
    #[inline]
    pub(super) fn fits_fully(&self, state: &PoolState, index: usize) -> bool {
        match self.small_fully(state) {
            Some(small) => fits_small(small, &state.small[index].allocatable),
            None => self.requests.fits_in(&state.allocatable[index]),
        }
    }

    /// The grown requests of the [`SMALL`] resources when they are all [`Self::fits_fully`]
    /// compares for the pool whose state is `state`.
    pub(super) fn small_fully(&self, state: &PoolState) -> Option<&[i64; SMALL]> {
        self.small
            .as_ref()
            .filter(|_| state.only_small && self.nothing_else)
    }

    /// Whether `allocatable`, which held `before`, holds the grown requests.
    pub(super) fn fits_in(&self, allocatable: &Resources) -> bool {
        match &self.small {
            Some(small) => fits_small(small, &std::array::from_fn(|r| allocatable.0[r])),
            None => self.requests.fits_in(allocatable),
        }
    }
}

/// Whether `requests` fit in `allocatable`, both of the [`SMALL`] resources.
#[inline]
pub(super) fn fits_small(requests: &[i64; SMALL], allocatable: &[i64; SMALL]) -> bool {
    requests
        .iter()
        .zip(allocatable)
        .fold(true, |fits, (need, have)| fits & (need <= have))
}

/// The largest amount of each resource among `resources`.
pub(super) fn elementwise_max(resources: impl Iterator<Item = Resources>) -> Resources {
    resources.fold(Resources::ZERO, |acc, r| acc.max(&r))
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

/// Per resource, over a claim's launch options: the largest and smallest allocatable, and
/// the largest capacity (what the claim reserves of the pool's limits).
#[derive(Clone, Copy)]
pub(super) struct TypeBounds {
    pub(super) largest: Resources,
    pub(super) smallest: Resources,
    pub(super) reserved: Resources,
}

impl TypeBounds {
    /// The bounds of no type yet, for [`TypeBounds::include`] to widen (the smallest
    /// allocatable starts at the most of each resource the pool's types have).
    pub(super) fn start(state: &PoolState) -> TypeBounds {
        let mut out = TypeBounds {
            largest: Resources::ZERO,
            smallest: Resources::ZERO,
            reserved: Resources::ZERO,
        };
        if state.only_small {
            out.smallest.0[..SMALL].fill(i64::MAX);
        } else {
            for &r in state.resources.iter() {
                out.smallest.0[r] = i64::MAX;
            }
        }
        out
    }

    /// Widens the bounds to type `index` of `pool` (whose state `state` is).
    #[inline(always)]
    pub(super) fn include(&mut self, state: &PoolState, pool: &NodePoolTemplate, index: usize) {
        if state.only_small {
            let small = &state.small[index];
            for r in 0..SMALL {
                self.largest.0[r] = self.largest.0[r].max(small.allocatable[r]);
                self.smallest.0[r] = self.smallest.0[r].min(small.allocatable[r]);
                self.reserved.0[r] = self.reserved.0[r].max(small.capacity[r]);
            }
        } else {
            let (a, c) = (
                &state.allocatable[index],
                &pool.instance_types[index].capacity,
            );
            for &r in state.resources.iter() {
                self.largest.0[r] = self.largest.0[r].max(a.0[r]);
                self.smallest.0[r] = self.smallest.0[r].min(a.0[r]);
                self.reserved.0[r] = self.reserved.0[r].max(c.0[r]);
            }
        }
    }
}

/// The bounds of `types` (of `pool`, whose state `state` is) per resource; all zero for no
/// type. The widening of [`TypeBounds::include`], written out with the bounds in local
/// arrays: placing and refitting claims runs it over hundreds of types, and folding
/// `include` instead made a 1,000-pod round slower (median 6.75 against 6.50 ms).
pub(super) fn type_bounds(
    state: &PoolState,
    pool: &NodePoolTemplate,
    types: &[Priced],
) -> TypeBounds {
    if types.is_empty() {
        return TypeBounds {
            largest: Resources::ZERO,
            smallest: Resources::ZERO,
            reserved: Resources::ZERO,
        };
    }
    let mut out = TypeBounds::start(state);
    if state.only_small {
        let (mut largest, mut smallest, mut reserved) = ([0; SMALL], [i64::MAX; SMALL], [0; SMALL]);
        for t in types {
            let small = &state.small[t.index];
            for r in 0..SMALL {
                largest[r] = largest[r].max(small.allocatable[r]);
                smallest[r] = smallest[r].min(small.allocatable[r]);
                reserved[r] = reserved[r].max(small.capacity[r]);
            }
        }
        out.largest.0[..SMALL].copy_from_slice(&largest);
        out.smallest.0[..SMALL].copy_from_slice(&smallest);
        out.reserved.0[..SMALL].copy_from_slice(&reserved);
        return out;
    }
    for t in types {
        let (a, c) = (
            &state.allocatable[t.index],
            &pool.instance_types[t.index].capacity,
        );
        for &r in state.resources.iter() {
            out.largest.0[r] = out.largest.0[r].max(a.0[r]);
            out.smallest.0[r] = out.smallest.0[r].min(a.0[r]);
            out.reserved.0[r] = out.reserved.0[r].max(c.0[r]);
        }
    }
    out
}
