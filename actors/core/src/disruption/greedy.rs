//! Upstream's consolidation methods, greedy as upstream runs them, over candidates already
//! filtered ([`super::consolidation::eligible`] and [`super::candidates`]) and cut to what
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

use std::collections::{BTreeMap, BTreeSet};

use super::NodeSnapshot;
use super::consolidation::{self, Consolidation, Settings, Unconsolidatable};
use super::simulation::{self, Simulation};
use crate::scheduling::SchedulingInput;

/// Multi-node consolidation looks at no more candidates than this.
pub const MULTI_NODE_MAX: usize = 100;

/// How much disrupting `node` costs, as upstream weighs it: one per pod that would move
/// (priority and `controller.kubernetes.io/pod-deletion-cost` are not read yet), times the
/// fraction of its `expireAfter` still ahead (a node expiring soon costs little to disrupt).
pub fn disruption_cost(node: &NodeSnapshot, now_ms: i64) -> f64 {
    let pods = node.reschedulable().count() as f64;
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
}

/// What the methods simulate against.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// What the scheduler's next round would see.
    pub base: &'a SchedulingInput,
    /// Nodes and NodeClaims already on their way out.
    pub leaving: &'a BTreeSet<String>,
    /// Consolidation settings.
    pub settings: Settings,
}

impl Context<'_> {
    /// The command that disrupting `candidates` together allows, if any.
    fn try_command(
        &self,
        candidates: &[&NodeSnapshot],
        simulations: &mut usize,
    ) -> Result<Found, Unconsolidatable> {
        *simulations += 1;
        let simulation = simulation::run(self.base, candidates, self.leaving);
        let consolidation =
            consolidation::decide(candidates, simulation.outcome(), self.base, self.settings)?;
        Ok(Found {
            candidates: candidates.iter().map(|c| c.nodeclaim.clone()).collect(),
            consolidation,
            simulation,
        })
    }
}

/// Multi-node consolidation over `candidates` (sorted, within budgets).
pub fn multi_node(context: &Context<'_>, candidates: &[&NodeSnapshot]) -> Search {
    let mut search = Search::default();
    let candidates = &candidates[..candidates.len().min(MULTI_NODE_MAX)];
    if candidates.len() < 2 {
        return search;
    }
    // The longest prefix of 2..=n candidates one command takes; each probe halves the range.
    let (mut low, mut high) = (2, candidates.len());
    while low <= high {
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
    let mut search = Search::default();
    let mut by_pool: BTreeMap<&str, Vec<&NodeSnapshot>> = BTreeMap::new();
    for c in candidates {
        by_pool.entry(c.nodepool.as_str()).or_default().push(c);
    }
    let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
    let turns = (0..longest).flat_map(|i| by_pool.values().filter_map(move |v| v.get(i)));
    for candidate in turns {
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
#[path = "greedy_tests.rs"]
mod tests;
