//! Pods a round placed on a node that already runs (not on a NodeClaim on its way): they stay
//! pending until kube-scheduler binds them there. If kube-scheduler has not after the
//! nomination window, while the node was Ready and schedulable, the node is taken to have
//! refused the pod for a reason rounds do not model (a volume or port limit they cannot see,
//! a filter of a scheduler plugin), and the pod's later rounds look elsewhere: a pod is never
//! left waiting for good on a node that will not take it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use karpenter_core::model::{Pod, Requirement};
use karpenter_core::ports::NodeInfo;
use karpenter_core::vocab::labels::HOSTNAME;
use tokio::time::Instant;

/// The pods left to kube-scheduler and the nodes that refused them.
#[derive(Debug, Default)]
pub(crate) struct LeftToKubeScheduler {
    /// Per pod UID, the node rounds keep placing it on, and since when that node has been
    /// Ready and schedulable with the pod placed there.
    placed: BTreeMap<String, (String, Instant)>,
    /// Per pod UID, the nodes that did not take it.
    refused: BTreeMap<String, BTreeSet<String>>,
}

impl LeftToKubeScheduler {
    /// After a round: the pending pods it placed on running nodes, as (pod UID, node). A pod
    /// placed on the same node again keeps its clock; pods not placed on one are dropped.
    pub(crate) fn placed<'a>(
        &mut self,
        placements: impl IntoIterator<Item = (&'a str, &'a str)>,
        now: Instant,
    ) {
        let mut placed = BTreeMap::new();
        for (uid, node) in placements {
            let since = match self.placed.remove(uid) {
                Some((same, since)) if same == node => since,
                _ => now,
            };
            placed.insert(uid.to_owned(), (node.to_owned(), since));
        }
        self.placed = placed;
    }

    /// The pods kube-scheduler has had `window` to bind on a Ready, schedulable node and did
    /// not, as (pod UID, node): from now on that node is refused to them. The clock of a pod
    /// whose node is not Ready or schedulable (or gone) starts again, and so does every clock
    /// while pods are `in_flight` (nominated to NodeClaims on their way, or moving onto
    /// replacements): rounds count those pods where they will run, kube-scheduler only once
    /// they do, so a topology spread it refuses now may well allow the pod once they land.
    pub(crate) fn expire(
        &mut self,
        nodes: &[NodeInfo],
        in_flight: bool,
        window: Duration,
        now: Instant,
    ) -> Vec<(String, String)> {
        let mut expired = Vec::new();
        self.placed.retain(|uid, (node, since)| {
            let open = !in_flight
                && nodes
                    .iter()
                    .any(|n| n.name == *node && n.ready && !n.unschedulable);
            if !open {
                *since = now;
                return true;
            }
            if now.duration_since(*since) < window {
                return true;
            }
            expired.push((uid.clone(), node.clone()));
            false
        });
        for (uid, node) in &expired {
            self.refused
                .entry(uid.clone())
                .or_default()
                .insert(node.clone());
        }
        expired
    }

    /// The pod as rounds see it: kept off the nodes that refused it (by their hostname, which
    /// a NodeClaim yet to launch does not have).
    pub(crate) fn shape(&self, pod: &Pod) -> Pod {
        let mut pod = pod.clone();
        if let Some(nodes) = self.refused.get(&pod.uid) {
            pod.node_selector
                .add(HOSTNAME, Requirement::not_in(nodes.iter().cloned()));
        }
        pod
    }

    /// A pod bound or gone.
    pub(crate) fn forget(&mut self, uid: &str) {
        self.placed.remove(uid);
        self.refused.remove(uid);
    }

    /// Pods left to kube-scheduler now.
    pub(crate) fn len(&self) -> usize {
        self.placed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, unschedulable: bool) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            provider_id: String::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            allocatable: karpenter_core::model::Resources::ZERO,
            requested: karpenter_core::model::Resources::ZERO,
            daemon_requested: karpenter_core::model::Resources::ZERO,
            pods: Vec::new(),
            anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            attach_limits: BTreeMap::new(),
            attached: Vec::new(),
            ready,
            unschedulable,
        }
    }

    fn pod(uid: &str) -> Pod {
        Pod::simple(uid, 500, 1 << 30)
    }

    fn hostname_allows(pod: &Pod, node: &str) -> bool {
        let labels = BTreeMap::from([(HOSTNAME.to_owned(), node.to_owned())]);
        pod.node_selector.matches_labels(&labels).is_ok()
    }

    #[test]
    fn a_node_that_does_not_take_a_pod_within_the_window_is_refused_to_it() {
        let window = Duration::from_secs(20);
        let t0 = Instant::now();
        let mut left = LeftToKubeScheduler::default();
        left.placed([("a", "n1"), ("b", "n1")], t0);
        let nodes = [node("n1", true, false)];
        assert!(
            left.expire(&nodes, false, window, t0 + Duration::from_secs(19))
                .is_empty()
        );
        // Placed on n1 again: the clock keeps running; b is placed elsewhere and starts anew.
        left.placed([("a", "n1"), ("b", "n2")], t0 + Duration::from_secs(10));
        let nodes = [node("n1", true, false), node("n2", true, false)];
        let expired = left.expire(&nodes, false, window, t0 + Duration::from_secs(21));
        assert_eq!(expired, [("a".to_owned(), "n1".to_owned())]);
        assert_eq!(left.len(), 1, "b still waits on n2");

        let shaped = left.shape(&pod("a"));
        assert!(!hostname_allows(&shaped, "n1"));
        assert!(hostname_allows(&shaped, "n2"));
        let req = shaped
            .node_selector
            .get(HOSTNAME)
            .expect("a hostname requirement");
        assert!(
            req.allows_absent(),
            "a NodeClaim yet to launch has no hostname"
        );
        assert!(left.shape(&pod("b")).node_selector.get(HOSTNAME).is_none());
        left.forget("a");
        assert!(left.shape(&pod("a")).node_selector.get(HOSTNAME).is_none());
    }

    #[test]
    fn the_clock_runs_only_while_the_node_could_take_the_pod_and_nothing_is_in_flight() {
        let window = Duration::from_secs(20);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut left = LeftToKubeScheduler::default();
        left.placed([("a", "n1")], t0);
        // Not Ready at 15 s, cordoned at 30 s: each time the clock starts again.
        let up = [node("n1", true, false)];
        assert!(
            left.expire(&[node("n1", false, false)], false, window, at(15))
                .is_empty()
        );
        assert!(
            left.expire(&[node("n1", true, true)], false, window, at(30))
                .is_empty()
        );
        // Pods in flight at 40 s: the clock starts again then.
        assert!(left.expire(&up, true, window, at(40)).is_empty());
        assert!(left.expire(&up, false, window, at(59)).is_empty());
        assert_eq!(left.expire(&up, false, window, at(61)).len(), 1);
        // A node that is gone never expires a pod.
        left.placed([("b", "n9")], t0);
        assert!(left.expire(&[], false, window, at(100)).is_empty());
    }
}
