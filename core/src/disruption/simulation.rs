//! Whether candidates' pods would fit elsewhere: a scheduling round over the cluster without
//! the candidates (and without nodes already on their way out), placing the pods that would
//! have to move together with the pods pending now, as upstream's `SimulateScheduling` does.
//! Pending pods take part so that moved pods do not take the room they are waiting for; only
//! the moved pods have to fit, and only the new NodeClaims that take moved pods are
//! replacements (other pending pods are left to the scheduler's own rounds).
//!
//! Consolidation closes nodes younger than their pool's `consolidateAfter` to the moved pods
//! (as upstream: a node that just came up may be consolidated itself soon): they keep their
//! pods and take pending ones, and carry a taint the moved pods do not tolerate (a pod that
//! tolerates the disrupted taint never has to move).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::NodeSnapshot;
use crate::model::Taint;
use crate::scheduling::{
    PlannedNodeClaim, PreparedPools, ReservedOfferingMode, SchedulingInput, SchedulingResult,
    solve_in,
};
use crate::vocab::labels;

/// The nodes a simulation leaves out or closes, and the base's NodePools when several
/// simulations share them.
#[derive(Debug, Clone, Copy)]
pub struct Rest<'a> {
    /// Nodes and NodeClaims already on their way out: not in the simulated cluster.
    pub leaving: &'a BTreeSet<String>,
    /// Nodes that take no moved pod.
    pub closed: &'a BTreeSet<String>,
    /// The base's NodePools prepared once for every simulation of a pass.
    pub pools: Option<&'a PreparedPools>,
}

/// A simulation's input and result.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The round that was simulated.
    pub input: SchedulingInput,
    /// What it decided.
    pub result: SchedulingResult,
    /// UIDs of the pods that would move.
    pub moved: BTreeSet<String>,
}

/// What a simulation says about the candidates.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every pod that would move fits: on existing nodes and on these new NodeClaims.
    Fits {
        /// The replacements: the new NodeClaims that take moved pods (with the pending pods
        /// planned beside them, which the scheduler nominates to them).
        replacements: Vec<PlannedNodeClaim>,
    },
    /// Some pods that would move fit nowhere: `(pod uid, why)`.
    Blocked(Vec<(String, String)>),
}

/// The round that simulates removing `candidates`: `base` (what the scheduler's next round
/// would see) without their nodes or the nodes `rest` leaves out, with their reschedulable
/// pods added to the pods to place.
pub fn input(
    base: &SchedulingInput,
    candidates: &[&NodeSnapshot],
    rest: Rest<'_>,
) -> (SchedulingInput, BTreeSet<String>) {
    let leaving = rest.leaving;
    let gone: BTreeSet<&str> = candidates
        .iter()
        .filter_map(|c| c.node.as_deref())
        .chain(candidates.iter().map(|c| c.nodeclaim.as_str()))
        .chain(leaving.iter().map(String::as_str))
        .collect();
    let mut input = SchedulingInput {
        pods: base.pods.clone(),
        nodepools: base.nodepools.clone(),
        // A simulation plans replacements for pods; static pools launch in rounds only.
        static_pools: Vec::new(),
        existing: base
            .existing
            .iter()
            .filter(|n| !gone.contains(n.name.as_str()))
            .map(|n| {
                let mut n = n.clone();
                if rest.closed.contains(&n.name) {
                    Arc::make_mut(&mut n).taints.push(Taint::new(
                        labels::DISRUPTED_TAINT,
                        "",
                        "NoSchedule",
                    ));
                }
                n
            })
            .collect(),
        daemonsets: base.daemonsets.clone(),
        preference_policy: base.preference_policy,
        min_values_policy: base.min_values_policy,
        namespace_labels: base.namespace_labels.clone(),
    };
    let mut moved = BTreeSet::new();
    for pod in candidates.iter().flat_map(|c| c.reschedulable()) {
        if moved.insert(pod.pod.uid.clone()) {
            input.pods.push(pod.pod.clone());
        }
    }
    // In the solver's order, so it does not copy the round to sort it.
    input.pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    (input, moved)
}

/// Runs the simulation.
pub fn run(base: &SchedulingInput, candidates: &[&NodeSnapshot], rest: Rest<'_>) -> Simulation {
    let (input, moved) = input(base, candidates, rest);
    let result = solve_in(&input, rest.pools, ReservedOfferingMode::Fallback);
    Simulation {
        input,
        result,
        moved,
    }
}

impl Simulation {
    /// What it says about the candidates.
    pub fn outcome(&self) -> Outcome {
        let blocked: Vec<(String, String)> = self
            .result
            .unschedulable
            .iter()
            .filter(|u| self.moved.contains(&u.pod))
            .map(|u| (u.pod.clone(), u.reason.clone()))
            .collect();
        if !blocked.is_empty() {
            return Outcome::Blocked(blocked);
        }
        let replacements = self
            .result
            .new_claims
            .iter()
            .filter(|c| c.pods.iter().any(|p| self.moved.contains(p)))
            .cloned()
            .collect();
        Outcome::Fits { replacements }
    }
}
