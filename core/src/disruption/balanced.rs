//! The `Balanced` consolidation policy (upstream's `designs/balanced-consolidation.md`): a
//! consolidation command taking nodes of a Balanced NodePool goes ahead only when what it
//! saves, as a fraction of what the pool costs, is at least half of what it disrupts, as a
//! fraction of what disrupting the whole pool would:
//!
//! ```text
//! score = (savings / pool cost) / (disruption / pool disruption)    approved when score ≥ 1/k, k = 2
//! ```
//!
//! - A node's disruption is 1 (the node itself) plus each pod that would move weighed by its
//!   [`Pod::eviction_cost`](crate::model::Pod::eviction_cost) (negative weights count 0);
//!   a pool's is the sum over its launched nodes, candidates or not, taken once per pass
//!   ([`Balance::new`]).
//! - Emptiness is not scored (an empty node scores its whole price against 1), and neither
//!   are drift, expiration or interruption: only the consolidation methods.
//! - A command whose candidates span pools scores each Balanced pool on its own, with the
//!   savings shared out by each pool's part of the candidates' price; every Balanced pool
//!   must approve. Candidates of other pools are not scored.
//! - A node whose best move (deleting it, saving its whole price) cannot pass is not
//!   simulated at all ([`Balance::may_pass`]).
//!
//! Upstream's scoring ignores a node's remaining lifetime (candidate order already counts
//! it), and so does this one.

use std::collections::BTreeMap;

use crate::api::nodepool::ConsolidationPolicy;
use crate::disruption::{NodeSnapshot, Snapshot};

/// Upstream's `k`: a move passes when its disruption fraction is at most `k` times its
/// savings fraction.
pub const K: f64 = 2.0;

/// A Balanced NodePool's totals, as its moves are scored against.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    /// What its launched nodes cost together ($/h).
    pub cost: f64,
    /// What disrupting all of them would ([`reschedule_cost`] summed).
    pub disruption: f64,
}

/// A move's score in one Balanced pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    /// The pool.
    pub nodepool: String,
    /// The move's savings over the pool's cost.
    pub savings_fraction: f64,
    /// The move's disruption over the pool's.
    pub disruption_fraction: f64,
}

impl Score {
    /// Savings fraction over disruption fraction (0 when either is not positive).
    pub fn score(&self) -> f64 {
        if self.savings_fraction <= 0.0 || self.disruption_fraction <= 0.0 {
            0.0
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    /// Whether the move passes: its score reaches 1/[`K`].
    pub fn approved(&self) -> bool {
        self.score() >= 1.0 / K
    }
}

impl std::fmt::Display for Score {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "score {:.2} {} threshold {:.2} in NodePool {} (savings {:.1}%, disruption {:.1}%)",
            self.score(),
            if self.approved() { ">=" } else { "<" },
            1.0 / K,
            self.nodepool,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0,
        )
    }
}

/// What disrupting `node` costs in a Balanced score: 1 for the node, plus each pod that
/// would move weighed by its eviction cost (at least 0).
pub fn reschedule_cost(node: &NodeSnapshot) -> f64 {
    1.0 + node
        .reschedulable()
        .map(|p| p.pod.eviction_cost().max(0.0))
        .sum::<f64>()
}

/// The totals of a pass's Balanced NodePools, against which their moves are scored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Balance {
    totals: BTreeMap<String, PoolTotals>,
}

impl Balance {
    /// No Balanced pool: every move passes.
    pub const fn none() -> Balance {
        Balance {
            totals: BTreeMap::new(),
        }
    }

    /// The totals of `snapshot`'s Balanced pools, over their launched nodes not being deleted.
    pub fn new(snapshot: &Snapshot) -> Balance {
        let mut totals: BTreeMap<String, PoolTotals> = snapshot
            .pools
            .iter()
            .filter(|p| p.policy == ConsolidationPolicy::Balanced)
            .map(|p| (p.name.clone(), PoolTotals::default()))
            .collect();
        for node in &snapshot.nodes {
            if node.offering.is_none() || node.deleting() {
                continue;
            }
            if let Some(t) = totals.get_mut(&node.nodepool) {
                t.cost += node.price;
                t.disruption += reschedule_cost(node);
            }
        }
        Balance { totals }
    }

    /// The totals of a Balanced pool (`None` for a pool of another policy).
    pub fn totals(&self, nodepool: &str) -> Option<PoolTotals> {
        self.totals.get(nodepool).copied()
    }

    /// Scores a move taking `candidates` that saves `savings` ($/h): one score per Balanced
    /// pool among them, in pool name order.
    pub fn scores(&self, candidates: &[&NodeSnapshot], savings: f64) -> Vec<Score> {
        let mut by_pool: BTreeMap<&str, Vec<&NodeSnapshot>> = BTreeMap::new();
        for c in candidates {
            by_pool.entry(c.nodepool.as_str()).or_default().push(c);
        }
        let source: f64 = candidates.iter().map(|c| c.price).sum();
        let shared = by_pool.len() > 1 && source > 0.0;
        by_pool
            .into_iter()
            .filter_map(|(pool, nodes)| {
                let totals = self.totals(pool)?;
                let part = if shared {
                    savings * nodes.iter().map(|c| c.price).sum::<f64>() / source
                } else {
                    savings
                };
                let disruption: f64 = nodes.iter().map(|c| reschedule_cost(c)).sum();
                Some(score(pool, part, disruption, totals))
            })
            .collect()
    }

    /// Whether a move taking `candidates` and saving `savings` may go ahead: every Balanced
    /// pool among them approves (candidates of other pools are not scored); if not, the
    /// score of the first pool that refuses.
    pub fn approve(&self, candidates: &[&NodeSnapshot], savings: f64) -> Result<(), Score> {
        if self.totals.is_empty() {
            return Ok(());
        }
        match self
            .scores(candidates, savings)
            .into_iter()
            .find(|s| !s.approved())
        {
            Some(rejected) => Err(rejected),
            None => Ok(()),
        }
    }

    /// Whether `node`'s best move, deleting it and saving its whole price, would pass: when
    /// it would not, no move taking it alone will, and it need not be simulated.
    pub fn may_pass(&self, node: &NodeSnapshot) -> Result<(), Score> {
        self.approve(&[node], node.price)
    }
}

fn score(nodepool: &str, savings: f64, disruption: f64, totals: PoolTotals) -> Score {
    let fraction = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    Score {
        nodepool: nodepool.to_owned(),
        savings_fraction: fraction(savings, totals.cost),
        disruption_fraction: fraction(disruption, totals.disruption),
    }
}

#[cfg(test)]
mod tests;
