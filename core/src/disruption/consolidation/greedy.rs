//! Upstream's consolidation methods, greedy as upstream runs them, over candidates already
//! filtered ([`super::command::eligible`] and [`crate::disruption::candidates`]) and cut to what
//! their pools' budgets allow:
//!
//! - **multi-node**: the candidates in order of [`disruption_cost`] (cheapest to disrupt
//!   first), at most [`MULTI_NODE_MAX`]; a binary search for the longest prefix of two or
//!   more that one delete or replace command can take;
//! - **single-node**: candidates taken in turn from each NodePool (round-robin, each pool's in
//!   order of disruption cost); the first one a command can take wins.
//!
//! They serve as the consolidation baseline (`karpenter bench consolidation`) and as what
//! a better method is checked against.

use std::collections::BTreeMap;
use std::time::Instant;

use super::command::{self, Consolidation, Settings, Unconsolidatable};
use crate::disruption::NodeSnapshot;
use crate::disruption::balanced::Balance;
use crate::disruption::simulation::{self, Rest, Simulation};
use crate::scheduling::SchedulingInput;

/// Multi-node consolidation looks at no more candidates than this.
pub const MULTI_NODE_MAX: usize = 100;

/// How much disrupting `node` costs, as upstream weighs it: the
/// [`eviction cost`](crate::model::Pod::eviction_cost) of each pod that would move (1 for a
/// pod of default priority without `controller.kubernetes.io/pod-deletion-cost`, up to 10
/// for a critical one, below 0 for one at negative priority), times the fraction of its
/// `expireAfter` still ahead (a node expiring soon costs little to disrupt).
pub fn disruption_cost(node: &NodeSnapshot, now_ms: i64) -> f64 {
    let pods: f64 = node.reschedulable().map(|p| p.pod.eviction_cost()).sum();
    let remaining = match node.expire_after {
        Some(after) if !after.is_zero() => {
            let life = after.as_millis() as f64;
            let age = now_ms.saturating_sub(node.created_ms).max(0) as f64;
            ((life - age) / life).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    pods * remaining
}

/// `candidates` in the order the methods try them: cheapest to disrupt first, then by name
/// (so the same snapshot gives the same order in a replay).
pub fn by_disruption_cost<'a>(
    candidates: &[&'a NodeSnapshot],
    now_ms: i64,
) -> Vec<&'a NodeSnapshot> {
    let mut sorted = candidates.to_vec();
    sorted.sort_by(|a, b| {
        disruption_cost(a, now_ms)
            .total_cmp(&disruption_cost(b, now_ms))
            .then_with(|| a.nodeclaim.cmp(&b.nodeclaim))
    });
    sorted
}

/// A command a method found.
#[derive(Debug, Clone)]
pub struct Found {
    /// The NodeClaims it disrupts.
    pub candidates: Vec<String>,
    /// What it does with them.
    pub consolidation: Consolidation,
    /// The simulation it was decided from.
    pub simulation: Simulation,
}

/// What a method found, and what it tried.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// The command, if one was found.
    pub found: Option<Found>,
    /// Scheduling simulations run.
    pub simulations: usize,
    /// Single candidates that could not be consolidated, with why (`Unconsolidatable`
    /// Events).
    pub unconsolidatable: Vec<(String, Unconsolidatable)>,
    /// The deadline passed before every candidate was tried.
    pub timed_out: bool,
}

/// What the methods simulate against.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// What the scheduler's next round would see.
    pub base: &'a SchedulingInput,
    /// Nodes already on their way out, and nodes closed to moved pods.
    pub rest: Rest<'a>,
    /// Consolidation settings.
    pub settings: Settings,
    /// The Balanced pools' totals, which their moves must pass.
    pub balance: &'a Balance,
    /// A search stops trying more candidates after this (upstream: 1 min for multi-node,
    /// 3 min for single-node), with the best command found so far.
    pub deadline: Option<Instant>,
}

impl Context<'_> {
    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The command that disrupting `candidates` together allows, if any.
    pub fn try_command(
        &self,
        candidates: &[&NodeSnapshot],
        simulations: &mut usize,
    ) -> Result<Found, Unconsolidatable> {
        *simulations += 1;
        let simulation = simulation::run(self.base, candidates, self.rest);
        let consolidation =
            command::decide(candidates, simulation.outcome(), self.base, self.settings)?;
        (self.balance)
            .approve(candidates, consolidation.savings)
            .map_err(Unconsolidatable::NotWorthIt)?;
        Ok(Found {
            candidates: candidates.iter().map(|c| c.nodeclaim.clone()).collect(),
            consolidation,
            simulation,
        })
    }
}

/// Multi-node consolidation over `candidates` (sorted, within budgets): the longest prefix
/// of two to [`MULTI_NODE_MAX`] of them one command takes.
pub fn multi_node(context: &Context<'_>, candidates: &[&NodeSnapshot]) -> Search {
    let n = candidates.len().min(MULTI_NODE_MAX);
    longest_prefix(context, &candidates[..n], 2, n)
}

/// The longest prefix of `candidates`, of `shortest..=longest` nodes, one command takes,
/// found by binary search (each probe halves the range, so a failed probe rules out the
/// longer prefixes even where one of them would pass: upstream's search, kept as it is).
pub fn longest_prefix(
    context: &Context<'_>,
    candidates: &[&NodeSnapshot],
    shortest: usize,
    longest: usize,
) -> Search {
    let mut search = Search::default();
    let (mut low, mut high) = (shortest.max(1), longest.min(candidates.len()));
    while low <= high {
        if context.expired() {
            search.timed_out = true;
            break;
        }
        let mid = low + (high - low) / 2;
        match context.try_command(&candidates[..mid], &mut search.simulations) {
            Ok(found) => {
                search.found = Some(found);
                low = mid + 1;
            }
            Err(_) => high = mid - 1,
        }
    }
    search
}

/// Single-node consolidation over `candidates` (sorted, within budgets): pools take turns.
pub fn single_node(context: &Context<'_>, candidates: &[&NodeSnapshot]) -> Search {
    let mut by_pool: BTreeMap<&str, Vec<&NodeSnapshot>> = BTreeMap::new();
    for c in candidates {
        by_pool.entry(c.nodepool.as_str()).or_default().push(c);
    }
    let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
    let turns = (0..longest).flat_map(|i| by_pool.values().filter_map(move |v| v.get(i).copied()));
    first_valid(context, turns)
}

/// The first of `candidates` a command takes alone, with why each one before it failed.
pub fn first_valid<'a>(
    context: &Context<'_>,
    candidates: impl IntoIterator<Item = &'a NodeSnapshot>,
) -> Search {
    let mut search = Search::default();
    for candidate in candidates {
        if context.expired() {
            search.timed_out = true;
            break;
        }
        if let Err(score) = context.balance.may_pass(candidate) {
            let why = Unconsolidatable::NotWorthIt(score);
            search
                .unconsolidatable
                .push((candidate.nodeclaim.clone(), why));
            continue;
        }
        match context.try_command(&[candidate], &mut search.simulations) {
            Ok(found) => {
                search.found = Some(found);
                break;
            }
            Err(why) => search
                .unconsolidatable
                .push((candidate.nodeclaim.clone(), why)),
        }
    }
    search
}

#[cfg(test)]
mod tests;
