//! One disruption pass: expired NodeClaims, unhealthy nodes to repair, static NodePools'
//! excess NodeClaims, then the first method with a command, as upstream's disruption
//! controller (Emptiness → StaticDrift → Drift → MultiNodeConsolidation →
//! SingleNodeConsolidation).
//!
//! - **Expiration**: every NodeClaim whose `expireAfter` has passed since it was created and
//!   that is not being deleted already; forceful, so neither budgets nor candidate filters
//!   hold it back (its terminationGracePeriod bounds the drain).
//! - **Repair** (`NodeRepair` gate, forceful, outside budgets): [`super::repair`].
//! - **Emptiness** (reason `Empty`): [`super::emptiness`].
//! - **Static NodePools** (scale down, and StaticDrift with reason `Drifted`):
//!   [`super::statics`].
//! - **Drift** (reason `Drifted`): [`super::drift`].
//! - **Consolidation** (reason `Underutilized`): [`super::consolidation`].

use std::collections::{BTreeMap, BTreeSet};

use super::budgets::{self, BudgetError, PoolNodes};
use super::consolidation::command::Unconsolidatable;
use super::consolidation::condition::{self, Consolidatable};
use super::consolidation::{self, Search};
pub use super::decision::{Blocked, Decision};
use super::repair::{RepairPlan, RepairPolicy};
use super::{Method, Snapshot, drift, emptiness, repair, statics};
use crate::api::nodepool::DisruptionReason;
use crate::scheduling::{PoolCache, SchedulingInput};

/// What a pass decided, and what it saw on the way (for metrics, Events and the journal).
#[derive(Debug, Clone, Default)]
pub struct PassResult {
    /// NodeClaims whose `expireAfter` has passed.
    pub expired: Vec<String>,
    /// NodeClaims static NodePools have beyond their replicas.
    pub overprovisioned: Vec<String>,
    /// Static NodePools short of their replicas, with room under their node limit.
    pub static_short: Vec<String>,
    /// Unhealthy nodes to repair, and those their NodePool's health holds back (when
    /// [`Options::repair`]).
    pub repair: RepairPlan,
    /// The command, if a method had one.
    pub command: Option<Decision>,
    /// Nodes a method wanted but could not take.
    pub blocked: Vec<Blocked>,
    /// Per method, the candidates it would disrupt before budgets
    /// (`karpenter_voluntary_disruption_eligible_nodes`).
    pub eligible: BTreeMap<Method, usize>,
    /// Per pool and reason, how many more nodes may be disrupted now
    /// (`karpenter_nodepools_allowed_disruptions`), before this pass's command.
    pub allowed: BTreeMap<(String, DisruptionReason), usize>,
    /// Budgets that could not be read, by pool: they allow nothing.
    pub budget_errors: Vec<(String, BudgetError)>,
    /// Every initialized NodeClaim's `Consolidatable` condition now.
    pub consolidatable: BTreeMap<String, Consolidatable>,
    /// Scheduling simulations run.
    pub simulations: usize,
    /// Candidates single-node consolidation could not take, with why (`Unconsolidatable`
    /// Events).
    pub unconsolidatable: Vec<(String, Unconsolidatable)>,
    /// What the next pass's [`Options::unconsolidatable`] should be, when the single-node
    /// search ran: the candidates it could not consolidate now, and those it was told of and
    /// did not reach (when it did not run, the last ones still stand).
    pub unconsolidatable_next: Option<BTreeSet<String>>,
    /// Consolidation methods that stopped at their timeout.
    pub timed_out: Vec<Method>,
    /// The fingerprint of consolidation's inputs when it searched them all and found
    /// nothing (or skipped them, having found nothing in them before).
    pub consolidated: Option<u64>,
}

/// How a pass runs beyond its snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The consolidation search.
    pub search: Search,
    /// Whether consolidation stops at upstream's timeouts.
    pub timeouts: bool,
    /// The fingerprint of the last inputs consolidation found nothing in
    /// ([`PassResult::consolidated`]); the same inputs are not searched again.
    pub consolidated: Option<u64>,
    /// NodeClaims the last single-node search could not consolidate
    /// ([`PassResult::unconsolidatable_next`]): this one tries them after the others.
    pub unconsolidatable: &'a BTreeSet<String>,
    /// Node repair (the `NodeRepair` gate): under these policies; `None` takes those the
    /// snapshot recorded, if any.
    pub repair: Option<&'a [RepairPolicy]>,
    /// The catalogs of recent rounds over the base's NodePools, which the simulations start
    /// from instead of checking every instance type again (decisions are the same without).
    pub cache: Option<&'a PoolCache>,
    /// The content digest of each of the base's NodePool catalogs
    /// ([`crate::events::catalog_digest`], in [`SchedulingInput::all_pools`] order), which
    /// consolidation's fingerprint then hashes instead of every offering.
    pub catalogs: Option<&'a [String]>,
}

/// No NodeClaim.
const NONE: &BTreeSet<String> = &BTreeSet::new();

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            search: Search::Cluster,
            timeouts: true,
            consolidated: None,
            unconsolidatable: NONE,
            repair: None,
            cache: None,
            catalogs: None,
        }
    }
}

/// Runs a pass over `snapshot`. `base` is what the scheduler's next round would see; without
/// it, no command that moves pods is decided.
pub fn run(snapshot: &Snapshot, base: Option<&SchedulingInput>) -> PassResult {
    run_with(snapshot, base, Options::default())
}

/// [`run`] with a choice of consolidation search and timeouts.
pub fn run_with(
    snapshot: &Snapshot,
    base: Option<&SchedulingInput>,
    options: Options<'_>,
) -> PassResult {
    // The snapshot's own policies when none are given: a pass decided again repairs alike.
    let recorded = repair::of_snapshot(snapshot);
    let policies = options.repair.or(recorded.as_deref());
    let mut out = PassResult {
        expired: expired(snapshot),
        overprovisioned: statics::overprovisioned(snapshot),
        static_short: statics::short(snapshot),
        repair: policies
            .map(|policies| repair::plan(snapshot, policies))
            .unwrap_or_default(),
        ..PassResult::default()
    };
    for node in &snapshot.nodes {
        let condition = condition::of(snapshot, node);
        out.consolidatable.insert(node.nodeclaim.clone(), condition);
    }
    let counts = pool_counts(snapshot);
    let pools = || {
        snapshot
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.budgets.as_slice()))
    };
    for reason in budgets::ALL_REASONS {
        for (pool, left) in budgets::mapping(pools(), &counts, reason, snapshot.now_ms) {
            out.allowed.insert((pool, reason), left);
        }
    }
    for pool in &snapshot.pools {
        out.budget_errors.extend(
            budgets::errors(&pool.budgets)
                .into_iter()
                .map(|e| (pool.name.clone(), e)),
        );
    }
    // Expiring and repaired NodeClaims use the budgets up from now on.
    let expiring: BTreeSet<&str> = (out.expired.iter())
        .chain(out.repair.repair.iter().map(|r| &r.nodeclaim))
        .map(String::as_str)
        .collect();
    let left = |reason: DisruptionReason| -> BTreeMap<String, usize> {
        let mut map: BTreeMap<String, usize> = snapshot
            .pools
            .iter()
            .map(|p| (p.name.clone(), out.allowed[&(p.name.clone(), reason)]))
            .collect();
        for node in snapshot
            .nodes
            .iter()
            .filter(|n| expiring.contains(n.nodeclaim.as_str()))
        {
            if !node.disrupting()
                && node.initialized_ms.is_some()
                && let Some(n) = map.get_mut(&node.nodepool)
            {
                *n = n.saturating_sub(1);
            }
        }
        map
    };
    let mut budget = left(DisruptionReason::Empty);
    let (command, eligible, blocked, _) =
        emptiness::method(snapshot, &out.consolidatable, &expiring, &mut budget);
    out.eligible.insert(Method::Emptiness, eligible);
    out.blocked.extend(blocked);
    out.command = command;
    let mut budget = left(DisruptionReason::Drifted);
    let (command, eligible, blocked, _) = statics::drift_method(
        snapshot,
        &expiring,
        base,
        out.command.is_none(),
        &mut budget,
    );
    out.eligible.insert(Method::StaticDrift, eligible);
    out.blocked.extend(blocked);
    if out.command.is_none() {
        out.command = command;
    }
    let (command, eligible, blocked, simulations) = drift::method(
        snapshot,
        &expiring,
        (base, options.cache),
        out.command.is_none(),
        &mut budget,
    );
    out.simulations += simulations;
    out.eligible.insert(Method::Drift, eligible);
    out.blocked.extend(blocked);
    if out.command.is_none() {
        out.command = command;
    }
    let budget = left(DisruptionReason::Underutilized);
    let consolidated = consolidation::run(&consolidation::Inputs {
        snapshot,
        conditions: &out.consolidatable,
        expiring: &expiring,
        base,
        budget: &budget,
        decide: out.command.is_none(),
        search: options.search,
        timeouts: options.timeouts,
        consolidated: options.consolidated,
        unconsolidatable: options.unconsolidatable,
        cache: options.cache,
        catalogs: options.catalogs,
    });
    out.consolidated = consolidated.consolidated;
    out.simulations += consolidated.simulations;
    out.eligible
        .insert(Method::MultiNodeConsolidation, consolidated.eligible);
    out.eligible
        .insert(Method::SingleNodeConsolidation, consolidated.eligible);
    for b in consolidated.blocked {
        // A node drift reported already is reported once.
        if !out.blocked.iter().any(|o| o.nodeclaim == b.nodeclaim) {
            out.blocked.push(b);
        }
    }
    out.unconsolidatable_next = consolidated.refused;
    out.unconsolidatable = consolidated.unconsolidatable;
    out.timed_out = consolidated.timed_out;
    if out.command.is_none() {
        out.command = consolidated.command;
    }
    out
}

/// Whether a pass over `snapshot` may need the scheduler's next round (`base`): only a
/// drifted node with pods that would have to move, or a consolidation candidate, is
/// simulated.
pub fn needs_base(snapshot: &Snapshot) -> bool {
    snapshot
        .nodes
        .iter()
        .any(|n| n.drifted.is_some() && !n.deleting() && n.reschedulable().next().is_some())
        || statics::needs_base(snapshot)
        || consolidation::may_consolidate(snapshot)
}

/// NodeClaims whose `expireAfter` has passed and that are not being deleted.
pub(super) fn expired(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .nodes
        .iter()
        .filter(|n| !n.deleting())
        .filter(|n| {
            n.expire_after.is_some_and(|after| {
                let after = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
                snapshot.now_ms >= n.created_ms.saturating_add(after)
            })
        })
        .map(|n| n.nodeclaim.clone())
        .collect()
}

/// Per pool, its initialized nodes and those of them disrupting.
pub fn pool_counts(snapshot: &Snapshot) -> BTreeMap<String, PoolNodes> {
    let mut counts: BTreeMap<String, PoolNodes> = BTreeMap::new();
    for node in snapshot.nodes.iter().filter(|n| n.initialized_ms.is_some()) {
        let entry = counts.entry(node.nodepool.clone()).or_default();
        entry.total += 1;
        if node.disrupting() {
            entry.disrupting += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests;
