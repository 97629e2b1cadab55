//! Lowering the price of a packing's planned NodeClaims after the greedy pass
//! ([`Improve::run`]): pairs, then groups of up to four, of claims of one class merge where
//! one type for them costs less ([`merge`]); then, for each claim, the fewest pods whose
//! removal lets it launch one price step cheaper (or, with no cheaper type, all of them)
//! move to claims that take them without growing ([`shrink`]), or, failing that, its pods
//! and those of the roomiest claims of its class are repacked together with it one step
//! cheaper ([`reshuffle`], [`refill`]).
//!
//! A move keeps every constraint of the moved pod and of the pods already on the target
//! (anti-affinity both ways, hostname spread counted with the newcomer, host ports) and stays
//! within the same zone and capacity type unless nothing counts the pod there, so zone-level
//! counts do not change.

use crate::model::{Pod, ResourceName};
use crate::vocab::labels;

use super::SchedulingInput;
use super::claims::{ClaimState, Claims, Plan, cheaper_target, retire, set_types};
use super::place::host_ports_taken;
use super::pools::PoolState;
use super::table::{PRICE_EPSILON, RequirementTable, fitting_types, min_values_met};
use super::topology::{Domain, KeyRef, Topology};

mod merge;
mod refill;
mod reshuffle;
mod shrink;

use reshuffle::Reshuffles;

/// The $/h of a plan's claims that hold pods.
fn live_price(plan: &Plan) -> f64 {
    crate::model::total_price(
        plan.claims
            .all
            .iter()
            .filter(|c| !c.pods.is_empty())
            .filter_map(|c| c.types.first().map(|t| t.price)),
    )
}

/// Shrink steps tried per claim.
const SHRINK_STEPS: usize = 4;

/// The improvement of one packing's plan.
pub(super) struct Improve<'r> {
    input: &'r SchedulingInput,
    plan: &'r mut Plan,
    topology: &'r mut Topology,
    /// Per pod, what its constraints say about moving it.
    rules: Vec<Option<MoveRules>>,
}

/// What the checks of a move read, borrowed apart from the requirement table (which they
/// fill as they go).
struct Moves<'v> {
    input: &'v SchedulingInput,
    pool_states: &'v [PoolState],
    claims: &'v Claims,
    topology: &'v Topology,
    rules: &'v [Option<MoveRules>],
}

impl<'r> Improve<'r> {
    /// `constrained_as` holds, per pod placed under an attempt other than its own
    /// constraints, the constraints it was placed under, which its moves keep.
    pub(super) fn new(
        input: &'r SchedulingInput,
        plan: &'r mut Plan,
        topology: &'r mut Topology,
        constrained_as: &[Option<Box<Pod>>],
    ) -> Self {
        let rules = input
            .pods
            .iter()
            .zip(constrained_as)
            .enumerate()
            .map(|(index, (pod, placed_as))| {
                MoveRules::new(placed_as.as_deref().unwrap_or(pod), index, topology)
            })
            .collect();
        Improve {
            input,
            plan,
            topology,
            rules,
        }
    }

    /// Merges, then shrinks each claim, those just over a price step first (they need the
    /// least moved).
    pub(super) fn run(mut self) {
        let mut order: Vec<usize> = (0..self.plan.claims.all.len()).collect();
        let keys: Vec<i64> = {
            let (moves, table) = self.split();
            moves
                .claims
                .all
                .iter()
                .map(|c| moves.overflow(table, c))
                .collect()
        };
        order.sort_by_key(|&i| (keys[i], i));
        self.merge_claims();
        // Group merges change what the shrinking after them finds; where the plan without
        // them ends cheaper, it is kept, so they never make a round dearer.
        if let Some((mut plan, mut topology)) = self.merge_groups() {
            let mut without = Improve {
                input: self.input,
                plan: &mut plan,
                topology: &mut topology,
                rules: self.rules.clone(),
            };
            without.shrink_all(order.clone());
            self.shrink_all(order);
            if live_price(&plan) + PRICE_EPSILON < live_price(self.plan) {
                *self.plan = plan;
                *self.topology = topology;
            }
            return;
        }
        self.shrink_all(order);
    }

    /// Shrinks each claim of `order` in turn.
    fn shrink_all(&mut self, order: Vec<usize>) {
        let live = self
            .plan
            .claims
            .all
            .iter()
            .filter(|c| !c.pods.is_empty())
            .count();
        let mut reshuffles = Reshuffles::new(self.input, &self.plan.pool_states, &self.plan.claims);
        for index in order {
            for _ in 0..SHRINK_STEPS {
                if !self.shrink_once(index, live) && !self.reshuffle_once(&mut reshuffles, index) {
                    break;
                }
            }
        }
    }

    /// The read-only view of the plan the checks use.
    fn moves(&self) -> Moves<'_> {
        Moves {
            input: self.input,
            pool_states: &self.plan.pool_states,
            claims: &self.plan.claims,
            topology: self.topology,
            rules: &self.rules,
        }
    }

    /// The view and the requirement table, for checks that price.
    fn split(&mut self) -> (Moves<'_>, &mut RequirementTable) {
        let Plan {
            table,
            pool_states,
            claims,
            ..
        } = &mut *self.plan;
        let moves = Moves {
            input: self.input,
            pool_states,
            claims,
            topology: self.topology,
            rules: &self.rules,
        };
        (moves, table)
    }

    /// Moves a pod between planned NodeClaims, refitting both and their topology counts.
    fn move_pod(&mut self, pod: usize, from: usize, to: usize) {
        let input = self.input;
        let Plan {
            table,
            pool_states,
            claims,
            ..
        } = &mut *self.plan;
        let requests = input.pods[pod].requests;
        let source = &mut claims.all[from];
        source.pods.retain(|&p| p != pod);
        source.requests = source.requests.sub(&requests);
        if source.pods.is_empty() {
            retire(&mut pool_states[source.pool], source);
        } else {
            refit(input, table, &mut pool_states[source.pool], source);
        }
        let target = &mut claims.all[to];
        if target.pods.is_empty() {
            // Moving back into a retired claim revives it.
            let state = &mut pool_states[target.pool];
            if let Some(n) = &mut state.nodes_left {
                *n -= 1;
            }
            target.requests = state.daemon;
        }
        target.pods.push(pod);
        target.requests = target.requests.add(&requests);
        refit(input, table, &mut pool_states[target.pool], target);
        let pools = (claims.all[from].pool, claims.all[to].pool);
        claims.reindex(from, &pool_states[pools.0].allocatable);
        claims.reindex(to, &pool_states[pools.1].allocatable);
        self.topology
            .move_between_claims(&input.pods, pod, from, to);
    }
}

impl Moves<'_> {
    /// How far a claim is over its next cheaper type, in CPU (`i64::MAX` without one).
    fn overflow(&self, table: &mut RequirementTable, claim: &ClaimState) -> i64 {
        let state = &self.pool_states[claim.pool];
        let pool = &self.input.nodepools[claim.pool];
        cheaper_target(pool, claim, table, state)
            .map(|t| {
                claim
                    .requests
                    .sub(&state.allocatable[t])
                    .get(ResourceName::Cpu)
            })
            .unwrap_or(i64::MAX)
    }

    /// Whether pod `moving` may join claim `to` (it is not on it): its own hostname rules,
    /// and those of the pods already there, hold with it counted.
    fn may_join(&self, moving: usize, to: usize) -> bool {
        let Moves {
            input,
            claims,
            topology,
            rules,
            pool_states,
            ..
        } = *self;
        let Some(own) = &rules[moving] else {
            return false;
        };
        let domain = Domain::Claim(to);
        if own
            .spread
            .iter()
            .any(|(g, max_skew)| topology.count_in(*g, &domain) + 1 > *max_skew)
            || own.anti.iter().any(|g| topology.count_in(*g, &domain) > 0)
        {
            return false;
        }
        let pod = &input.pods[moving];
        let target = &claims.all[to];
        if host_ports_taken(input, &pool_states[target.pool], target, pod) {
            return false;
        }
        claims.all[to].pods.iter().all(|&other| {
            let Some(theirs) = &rules[other] else {
                return true;
            };
            theirs
                .anti
                .iter()
                .all(|g| !topology.group_matches(*g, moving))
                && theirs.spread.iter().all(|(g, max_skew)| {
                    !topology.group_matches(*g, moving)
                        || topology.count_in(*g, &domain) < *max_skew
                })
        })
    }
}

/// Whether a claim still has a type to launch as, and enough of them for its minValues
/// (unless it was planned with them relaxed).
fn launchable(input: &SchedulingInput, table: &RequirementTable, claim: &ClaimState) -> bool {
    !claim.types.is_empty()
        && (claim.min_values_relaxed
            || min_values_met(
                &claim.types,
                &input.nodepools[claim.pool].instance_types,
                table.get(claim.requirements),
            )
            .is_ok())
}

/// What a pod's constraints say about moving it between planned NodeClaims; `None` for pods
/// that must stay (hostname affinity, which ties them to their node's other pods).
#[derive(Clone)]
struct MoveRules {
    /// Hard hostname spread groups with their maxSkew, and anti-affinity groups.
    spread: Vec<(Option<usize>, i64)>,
    anti: Vec<Option<usize>>,
    /// Neither constrained nor counted at zone level, so it may change zone.
    zone_free: bool,
}

impl MoveRules {
    /// The rules of pod `index` of the round, placed under `pod`'s constraints.
    fn new(pod: &Pod, index: usize, topology: &Topology) -> Option<Self> {
        if pod
            .pod_affinity
            .iter()
            .any(|t| !t.anti && t.topology_key == labels::HOSTNAME)
            || topology.matches_hostname_affinity(index)
        {
            return None;
        }
        Some(MoveRules {
            spread: pod
                .spread
                .iter()
                .filter(|s| !s.schedule_anyway && s.topology_key == labels::HOSTNAME)
                .map(|s| {
                    (
                        topology.group(KeyRef::spread(s, &pod.namespace)),
                        s.max_skew,
                    )
                })
                .collect(),
            anti: pod
                .pod_affinity
                .iter()
                .filter(|t| t.anti && t.topology_key == labels::HOSTNAME)
                .map(|t| topology.group(KeyRef::affinity(t, &pod.namespace)))
                .collect(),
            zone_free: pod
                .spread
                .iter()
                .all(|s| s.topology_key == labels::HOSTNAME)
                && pod
                    .pod_affinity
                    .iter()
                    .all(|t| t.topology_key == labels::HOSTNAME)
                && !topology.matches_zone_level_group(index),
        })
    }
}

/// Recomputes a claim's launch options after its pods changed.
fn refit(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &mut PoolState,
    claim: &mut ClaimState,
) {
    let pool = &input.nodepools[claim.pool];
    let priced = table.priced_types(pool, claim.pool, state, claim.requirements);
    let types = fitting_types(
        pool,
        state,
        &priced,
        claim.exotic_ok,
        &claim.requests,
        &claim.reserved,
    );
    set_types(pool, state, claim, types);
}
