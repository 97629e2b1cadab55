//! When a pod stops waiting for the node a round found for it, decided on the journal clock.
//!
//! A round places a pod either on a NodeClaim on its way (the pod is *nominated* to it) or on
//! a node that already runs (the pod is *left to kube-scheduler* there). Either way the pod
//! waits for kube-scheduler to bind it, and rounds do not model everything kube-scheduler
//! checks. So each wait has a clock, and [`check`] ends waits that ran out:
//!
//! - **A nomination** expires when the NodeClaim's Node has been Ready, schedulable and free
//!   of taints its nominated pods do not tolerate for the nomination window without
//!   kube-scheduler binding them there (upstream's nominations live about two batch windows):
//!   kube-scheduler may well have put another pod in their place. The pods are pending again
//!   and planned afresh.
//! - **A pod left on a running node** that kube-scheduler has not bound there within the
//!   window, while that node was Ready and schedulable, is taken to have been refused for a
//!   reason rounds do not model (a volume or port limit they cannot see, a scheduler
//!   plugin's filter): that node is refused to it from then on ([`LeftToKubeScheduler`]
//!   adds a `kubernetes.io/hostname NotIn` requirement to the pod as later rounds see it).
//!   This clock runs only while no pod is in flight (nominated to a NodeClaim, or moving onto
//!   a replacement): rounds count those pods where they will run, kube-scheduler only once
//!   they do, so a topology spread it refuses now may well allow the pod once they land.
//!
//! A clock starts again whenever its node is not open. The scheduler actor gathers a
//! [`NominationCheck`] (the clocks, the nodes as they are, the journal's now), carries out
//! the [`NominationOutcome`] and journals the check with its outcome whenever a clock runs
//! (`NominationsChecked`), so `journal verify` decides every recorded check again.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::events::nominations::{
    Expired, LeftPod, NodeFacts, NominatedClaim, NominatedPod, NominationCheck, NominationOutcome,
    NominationRecord,
};
use crate::model::Pod;
use crate::model::Requirement;
use crate::model::taints::untolerated;
#[cfg(test)]
use crate::model::{Taint, Toleration};
use crate::vocab::labels::HOSTNAME;

impl NominationOutcome {
    /// Whether the check is worth recording: a clock ran (a node was open to its pods) or a
    /// wait ran out. A check where every node was closed only restarts clocks.
    pub fn worth_recording(&self, check: &NominationCheck) -> bool {
        !self.expired.is_empty()
            || !self.open_since.is_empty()
            || self.left_since.values().any(|since| *since < check.at_ms)
    }
}

/// Decides a check.
pub fn check(input: &NominationCheck) -> NominationOutcome {
    let mut out = NominationOutcome::default();
    let by_provider: BTreeMap<&str, &NodeFacts> = input
        .nodes
        .iter()
        .map(|n| (n.provider_id.as_str(), n))
        .collect();
    let by_name: BTreeMap<&str, &NodeFacts> =
        input.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut still_nominated = false;
    for claim in &input.claims {
        let node = by_provider.get(claim.provider_id.as_str()).copied();
        let open = !claim.pods.is_empty()
            && node.is_some_and(|node| {
                node.ready
                    && !node.unschedulable
                    && claim
                        .pods
                        .iter()
                        .all(|pod| untolerated(&node.taints, &pod.tolerations).is_none())
            });
        if !open {
            still_nominated |= !claim.pods.is_empty();
            continue;
        }
        let since = claim.open_since_ms.unwrap_or(input.at_ms);
        if input.at_ms.saturating_sub(since) < input.window_ms {
            out.open_since.insert(claim.nodeclaim.clone(), since);
            still_nominated = true;
            continue;
        }
        let node = node.map(|n| n.name.clone()).unwrap_or_default();
        for pod in &claim.pods {
            out.expired.push(Expired {
                uid: pod.uid.clone(),
                nodeclaim: claim.nodeclaim.clone(),
                node: node.clone(),
            });
        }
    }
    let in_flight = still_nominated || input.in_flight_elsewhere;
    let mut left: Vec<&LeftPod> = input.left.iter().collect();
    left.sort_by(|a, b| a.uid.cmp(&b.uid));
    for pod in left {
        let open = !in_flight
            && by_name
                .get(pod.node.as_str())
                .is_some_and(|n| n.ready && !n.unschedulable);
        if !open {
            out.left_since.insert(pod.uid.clone(), input.at_ms);
        } else if input.at_ms.saturating_sub(pod.since_ms) < input.window_ms {
            out.left_since.insert(pod.uid.clone(), pod.since_ms);
        } else {
            out.expired.push(Expired {
                uid: pod.uid.clone(),
                nodeclaim: String::new(),
                node: pod.node.clone(),
            });
        }
    }
    out
}

/// The pods left to kube-scheduler on running nodes, their clocks, and the nodes that
/// refused them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftToKubeScheduler {
    /// Per pod UID, the node rounds keep placing it on, and since when its clock runs.
    placed: BTreeMap<String, (String, i64)>,
    /// Per pod UID, the nodes that did not take it.
    refused: BTreeMap<String, BTreeSet<String>>,
}

impl LeftToKubeScheduler {
    /// After a round: the pending pods it placed on running nodes, as (pod UID, node), at
    /// `now_ms`. A pod placed on the same node again keeps its clock; pods not placed on one
    /// are dropped.
    pub fn placed<'a>(
        &mut self,
        placements: impl IntoIterator<Item = (&'a str, &'a str)>,
        now_ms: i64,
    ) {
        let mut placed = BTreeMap::new();
        for (uid, node) in placements {
            let since = match self.placed.remove(uid) {
                Some((same, since)) if same == node => since,
                _ => now_ms,
            };
            placed.insert(uid.to_owned(), (node.to_owned(), since));
        }
        self.placed = placed;
    }

    /// The pods waiting, for a [`NominationCheck`].
    pub fn waiting(&self) -> Vec<LeftPod> {
        self.placed
            .iter()
            .map(|(uid, (node, since))| LeftPod {
                uid: uid.clone(),
                node: node.clone(),
                since_ms: *since,
            })
            .collect()
    }

    /// Carries out what a check decided about left pods: their clocks, and the nodes that
    /// refused the pods whose wait ran out.
    pub fn apply(&mut self, outcome: &NominationOutcome) {
        for expired in outcome.expired.iter().filter(|e| e.nodeclaim.is_empty()) {
            self.placed.remove(&expired.uid);
            self.refused
                .entry(expired.uid.clone())
                .or_default()
                .insert(expired.node.clone());
        }
        for (uid, since) in &outcome.left_since {
            if let Some((_, clock)) = self.placed.get_mut(uid) {
                *clock = *since;
            }
        }
    }

    /// The pod as rounds see it: kept off the nodes that refused it (by their hostname, which
    /// a NodeClaim yet to launch does not have).
    pub fn shape(&self, pod: &Pod) -> Pod {
        let mut pod = pod.clone();
        if let Some(nodes) = self.refused.get(&pod.uid) {
            pod.node_selector
                .add(HOSTNAME, Requirement::not_in(nodes.iter().cloned()));
        }
        pod
    }

    /// A pod bound or gone.
    pub fn forget(&mut self, uid: &str) {
        self.placed.remove(uid);
        self.refused.remove(uid);
    }

    /// Pods left to kube-scheduler now.
    pub fn len(&self) -> usize {
        self.placed.len()
    }

    /// Whether no pod is left to kube-scheduler.
    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
    }
}

#[cfg(test)]
mod tests;
