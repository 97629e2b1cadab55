//! The search a reshuffle packs with: pods, in order, into bins of given capacities, each
//! already holding the daemonset overhead, so that each pod may join its bin (hostname
//! anti-affinity and spread both ways, host ports); depth first, each pod trying the bins it
//! leaves tightest first, backtracking within a bounded number of placements.

use crate::model::pod::ports_conflict;
use crate::model::{ResourceName, Resources};

use super::super::SchedulingInput;
use super::super::topology::Topology;
use super::{MoveRules, Moves};

/// Placements a refill tries before giving up (it backtracks, so it is bounded).
pub(super) const REFILL_STEPS: usize = 1024;

impl Moves<'_> {
    /// Packs `pods` (in order) into bins of `capacities` holding `daemon` each, within
    /// `steps` placements: the bin of each pod, or `None`, and the steps used.
    pub(super) fn refill(
        &self,
        pods: &[usize],
        capacities: &[Resources],
        daemon: Resources,
        steps: usize,
    ) -> (Option<Vec<usize>>, usize) {
        let (input, topology, rules) = (self.input, self.topology, self.rules);
        if pods.iter().any(|&p| rules[p].is_none()) {
            return (None, 0);
        }
        let mut search = Refill {
            input,
            topology,
            rules,
            pods,
            capacities,
            loads: vec![daemon; capacities.len()],
            members: vec![Vec::new(); capacities.len()],
            assignment: Vec::with_capacity(pods.len()),
            steps_left: steps,
        };
        let packed = search.extend();
        (
            packed.then_some(search.assignment),
            steps - search.steps_left,
        )
    }
}

/// The state of one [`Moves::refill`] search.
struct Refill<'a> {
    input: &'a SchedulingInput,
    topology: &'a Topology,
    rules: &'a [Option<MoveRules>],
    pods: &'a [usize],
    capacities: &'a [Resources],
    loads: Vec<Resources>,
    members: Vec<Vec<usize>>,
    assignment: Vec<usize>,
    steps_left: usize,
}

impl Refill<'_> {
    /// Places the next pod and, recursively, the rest; whether all were placed.
    fn extend(&mut self) -> bool {
        let Some(&p) = self.pods.get(self.assignment.len()) else {
            return true;
        };
        let pod = &self.input.pods[p];
        let mut candidates: Vec<(f64, usize)> = Vec::with_capacity(self.capacities.len());
        for (bin, capacity) in self.capacities.iter().enumerate() {
            let load = self.loads[bin].add(&pod.requests);
            if !load.fits_in(capacity) || !self.may_join(p, bin) {
                continue;
            }
            // Two empty bins of one capacity are interchangeable: try only the first.
            if self.members[bin].is_empty()
                && candidates
                    .iter()
                    .any(|&(_, b)| self.members[b].is_empty() && self.capacities[b] == *capacity)
            {
                continue;
            }
            let left = capacity.sub(&load);
            let tightness = left.get(ResourceName::Cpu) as f64
                / capacity.get(ResourceName::Cpu).max(1) as f64
                + left.get(ResourceName::Memory) as f64
                    / capacity.get(ResourceName::Memory).max(1) as f64;
            candidates.push((tightness, bin));
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, bin) in candidates {
            if self.steps_left == 0 {
                return false;
            }
            self.steps_left -= 1;
            self.loads[bin] = self.loads[bin].add(&pod.requests);
            self.members[bin].push(p);
            self.assignment.push(bin);
            if self.extend() {
                return true;
            }
            self.assignment.pop();
            self.members[bin].pop();
            self.loads[bin] = self.loads[bin].sub(&pod.requests);
        }
        false
    }

    /// Whether pod `p` may join the pods of `bin` under their hostname rules and its own.
    fn may_join(&self, p: usize, bin: usize) -> bool {
        let (input, topology) = (self.input, self.topology);
        let pod = &input.pods[p];
        let here = &self.members[bin];
        let count = |group: Option<usize>| {
            here.iter()
                .filter(|&&q| topology.group_matches(group, q))
                .count() as i64
        };
        let Some(own) = &self.rules[p] else {
            return false;
        };
        own.anti.iter().all(|g| count(*g) == 0)
            && own.spread.iter().all(|(g, max_skew)| {
                count(*g) + i64::from(topology.group_matches(*g, p)) <= *max_skew
            })
            && here.iter().all(|&q| {
                !ports_conflict(&input.pods[q].host_ports, &pod.host_ports)
                    && self.rules[q].as_ref().is_none_or(|r| {
                        r.anti.iter().all(|g| !topology.group_matches(*g, p))
                            && r.spread.iter().all(|(g, max_skew)| {
                                !topology.group_matches(*g, p) || count(*g) < *max_skew
                            })
                    })
            })
    }
}
