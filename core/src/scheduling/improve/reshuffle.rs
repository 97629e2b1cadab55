//! Letting a planned NodeClaim launch one price step cheaper by repacking its pods together
//! with those of the claims of its class (same NodePool and requirements) with the most room:
//! whole-pod moves ([`Improve::shrink_once`]) fail when what must leave is coarser than any
//! one partner's room, while pooled rooms of several partners, refilled, often hold it.
//! Partners keep their price or get cheaper; the moves are undone otherwise.

use std::collections::BTreeMap;

use crate::model::{ResourceName, Resources};

use super::super::FIRST_FIT_GUARD_MAX_PODS;
use super::super::SchedulingInput;
use super::super::claims::{ClaimState, Claims, cheaper_target};
use super::super::pools::PoolState;
use super::super::table::PRICE_EPSILON;
use super::refill::REFILL_STEPS;
use super::{Improve, launchable};

/// Claims whose pods a reshuffle redistributes besides the one it shrinks.
const RESHUFFLE_PARTNERS: usize = 6;

/// Claims of a class looked at for partners, roomiest (when last sorted) first.
const RESHUFFLE_SCAN: usize = 4 * RESHUFFLE_PARTNERS;

/// Refill placements a round of up to [`FIRST_FIT_GUARD_MAX_PODS`] pods may spend on
/// reshuffles (a few milliseconds; small rounds are where a node saved counts most), and
/// what a larger round may (they are packed tighter already, and must stay fast).
const RESHUFFLE_STEPS_SMALL_ROUND: usize = 8192;
const RESHUFFLE_STEPS: usize = REFILL_STEPS;

/// The claims of each class (NodePool, requirements, exotic types allowed) for reshuffles,
/// roomiest first when last sorted, and the refill placements the round has left for them.
pub(super) struct Reshuffles {
    classes: BTreeMap<(usize, usize, bool), Vec<usize>>,
    steps_left: usize,
}

impl Reshuffles {
    pub(super) fn new(input: &SchedulingInput, pool_states: &[PoolState], claims: &Claims) -> Self {
        let mut classes: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
        for (i, claim) in claims.all.iter().enumerate() {
            classes.entry(class_of(claim)).or_default().push(i);
        }
        let mut reshuffles = Reshuffles {
            classes,
            steps_left: if input.pods.len() <= FIRST_FIT_GUARD_MAX_PODS {
                RESHUFFLE_STEPS_SMALL_ROUND
            } else {
                RESHUFFLE_STEPS
            },
        };
        let keys: Vec<_> = reshuffles.classes.keys().copied().collect();
        for key in keys {
            reshuffles.sort(key, pool_states, claims);
        }
        reshuffles
    }

    /// Orders a class roomiest first.
    fn sort(&mut self, key: (usize, usize, bool), pool_states: &[PoolState], claims: &Claims) {
        if let Some(members) = self.classes.get_mut(&key) {
            let room = |i: usize| room_units(&claims.all[i], &pool_states[key.0], claims);
            members.sort_by(|&a, &b| room(b).total_cmp(&room(a)).then(a.cmp(&b)));
        }
    }
}

fn class_of(claim: &ClaimState) -> (usize, usize, bool) {
    (claim.pool, claim.requirements, claim.exotic_ok)
}

/// What a claim has to spare at its price, as CPU, or memory per the round's typical memory
/// per vCPU, in vCPUs (summed: a partner with both takes pods of either shape).
fn room_units(claim: &ClaimState, state: &PoolState, claims: &Claims) -> f64 {
    let Some(cheapest) = claim.types.first() else {
        return 0.0;
    };
    let room = state.allocatable[cheapest.index]
        .sub(&claim.requests)
        .max(&Resources::ZERO);
    room.get(ResourceName::Cpu) as f64 / 1000.0
        + room.get(ResourceName::Memory) as f64 / claims.bytes_per_core
}

/// A class of claims: NodePool, requirements, whether exotic types are allowed.
type Class = (usize, usize, bool);

/// A repacking being tried.
struct Repack {
    /// The class of its claims.
    class: Class,
    /// The claim that shrinks, then its partners.
    bins: Vec<usize>,
    /// What each may hold: the shrinking claim its cheaper type, the partners their current one.
    capacities: Vec<Resources>,
    /// The cheaper type's capacity (pod sizes are fractions of it).
    capacity: Resources,
    /// The pool's daemonset overhead, which every bin holds.
    daemon: Resources,
    /// The pods of all the bins, in the order the search places them.
    pods: Vec<usize>,
}

impl Improve<'_> {
    /// One reshuffle of claim `index`; whether it happened.
    pub(super) fn reshuffle_once(&mut self, reshuffles: &mut Reshuffles, index: usize) -> bool {
        let Some(mut repack) = self.repack_of(reshuffles, index) else {
            return false;
        };
        let Some(assignment) = self.assign(reshuffles, &mut repack) else {
            return false;
        };
        self.apply(reshuffles, &repack, &assignment)
    }

    /// The claim with its partners, if it is movable, has a cheaper type, and their pooled
    /// room could hold what must leave it.
    fn repack_of(&mut self, reshuffles: &Reshuffles, index: usize) -> Option<Repack> {
        let (moves, table) = self.split();
        let (input, claims, rules) = (moves.input, moves.claims, moves.rules);
        let claim = &claims.all[index];
        let movable =
            |c: &ClaimState| !c.pods.is_empty() && c.pods.iter().all(|&p| rules[p].is_some());
        if reshuffles.steps_left == 0 || !movable(claim) {
            return None;
        }
        let class = class_of(claim);
        let pool = &input.nodepools[claim.pool];
        let state = &moves.pool_states[claim.pool];
        let target = cheaper_target(pool, claim, table, state)?;
        let capacity = state.allocatable[target];
        let excess = claim.requests.sub(&capacity).max(&Resources::ZERO);
        let mut partners: Vec<(f64, usize)> = reshuffles.classes[&class]
            .iter()
            .copied()
            .filter(|&i| i != index && movable(&claims.all[i]))
            .take(RESHUFFLE_SCAN)
            .map(|i| (room_units(&claims.all[i], state, claims), i))
            .filter(|(room, _)| *room > 0.0)
            .collect();
        partners.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        partners.truncate(RESHUFFLE_PARTNERS);
        let mut bins: Vec<usize> = vec![index];
        bins.extend(partners.iter().map(|&(_, i)| i));
        let capacities: Vec<Resources> = bins
            .iter()
            .map(|&i| match claims.all[i].types.first() {
                Some(t) if i != index => state.allocatable[t.index],
                _ => capacity,
            })
            .collect();
        let pooled_room = bins[1..]
            .iter()
            .zip(&capacities[1..])
            .fold(Resources::ZERO, |acc, (&i, c)| {
                acc.add(&c.sub(&claims.all[i].requests).max(&Resources::ZERO))
            });
        let pods: Vec<usize> = bins
            .iter()
            .flat_map(|&i| claims.all[i].pods.iter().copied())
            .collect();
        if !excess.fits_in(&pooled_room)
            || !whole_units_fit(input, &pods, &capacities, state.daemon)
        {
            return None;
        }
        Some(Repack {
            class,
            bins,
            capacities,
            capacity,
            daemon: state.daemon,
            pods,
        })
    }

    /// A bin for each pod of the repack: pods kept apart from others first (they restrict
    /// where the rest go), then largest by each measure of size in turn until one order
    /// packs. Leaves the repack's pods in the order that packed.
    fn assign(&self, reshuffles: &mut Reshuffles, repack: &mut Repack) -> Option<Vec<usize>> {
        let moves = self.moves();
        let (input, rules, capacity) = (moves.input, moves.rules, repack.capacity);
        let apart = |p: usize| rules[p].as_ref().is_some_and(|r| !r.anti.is_empty());
        let fraction = |p: usize, r: ResourceName| {
            input.pods[p].requests.get(r) as f64 / capacity.get(r).max(1) as f64
        };
        let sizes: [&dyn Fn(usize) -> f64; 3] = [
            &|p| fraction(p, ResourceName::Cpu) + fraction(p, ResourceName::Memory),
            &|p| fraction(p, ResourceName::Memory),
            &|p| fraction(p, ResourceName::Cpu),
        ];
        for size in sizes {
            repack.pods.sort_by(|&a, &b| {
                apart(b)
                    .cmp(&apart(a))
                    .then(size(b).total_cmp(&size(a)))
                    .then(a.cmp(&b))
            });
            let steps = REFILL_STEPS.min(reshuffles.steps_left);
            let (assignment, used) =
                moves.refill(&repack.pods, &repack.capacities, repack.daemon, steps);
            reshuffles.steps_left -= used;
            if assignment.is_some() || reshuffles.steps_left == 0 {
                return assignment;
            }
        }
        None
    }

    /// Moves the pods as assigned; keeps the moves if every bin keeps its price or gets
    /// cheaper (and stays launchable) and the bins cost less in all, else undoes them.
    fn apply(
        &mut self,
        reshuffles: &mut Reshuffles,
        repack: &Repack,
        assignment: &[usize],
    ) -> bool {
        let bins = &repack.bins;
        let price_of =
            |claims: &Claims, i: usize| claims.all[i].types.first().map_or(0.0, |t| t.price);
        let before: Vec<f64> = bins
            .iter()
            .map(|&i| price_of(&self.plan.claims, i))
            .collect();
        let mut moved: Vec<(usize, usize, usize)> = Vec::new();
        for (&pod, &bin) in repack.pods.iter().zip(assignment) {
            let from = bins
                .iter()
                .copied()
                .find(|&b| self.plan.claims.all[b].pods.contains(&pod));
            let Some(from) = from else { continue };
            let to = bins[bin];
            if from != to {
                self.move_pod(pod, from, to);
                moved.push((pod, from, to));
            }
        }
        let claims = &self.plan.claims;
        let kept = bins.iter().zip(&before).all(|(&i, &price)| {
            let c = &claims.all[i];
            c.pods.is_empty()
                || c.types
                    .first()
                    .is_some_and(|t| t.price <= price + PRICE_EPSILON)
                    && launchable(self.input, &self.plan.table, c)
        });
        let after: f64 = bins.iter().map(|&i| price_of(claims, i)).sum();
        if kept && after + PRICE_EPSILON < before.iter().sum::<f64>() {
            reshuffles.sort(repack.class, &self.plan.pool_states, claims);
            return true;
        }
        for &(pod, from, to) in moved.iter().rev() {
            self.move_pod(pod, to, from);
        }
        false
    }
}

/// A quick necessary condition for packing `pods` into bins of `capacities` (each holding
/// `daemon`): for CPU and memory, pods whose request is a multiple of one of the requested
/// values fill a bin only in whole multiples of it (the bound's rounding cut, per bin).
fn whole_units_fit(
    input: &SchedulingInput,
    pods: &[usize],
    capacities: &[Resources],
    daemon: Resources,
) -> bool {
    [ResourceName::Cpu, ResourceName::Memory]
        .into_iter()
        .all(|r| {
            let mut units: Vec<i64> = pods
                .iter()
                .map(|&p| input.pods[p].requests.get(r))
                .filter(|q| *q > 0)
                .collect();
            units.sort_unstable();
            units.dedup();
            units.iter().all(|&unit| {
                let needed: i64 = pods
                    .iter()
                    .map(|&p| input.pods[p].requests.get(r))
                    .filter(|q| *q > 0 && q % unit == 0)
                    .sum();
                let held: i64 = capacities
                    .iter()
                    .map(|c| (c.get(r) - daemon.get(r)).max(0) / unit * unit)
                    .sum();
                needed <= held
            })
        })
}
