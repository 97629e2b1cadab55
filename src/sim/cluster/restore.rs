//! A resumed simulation's cluster: the process that was killed held the simulated cluster
//! as well as the autoscaler, but a real cluster outlives its autoscaler. So a resumed run
//! puts the pods back as its journal last saw them: the same UIDs and names for the pods
//! the workloads still have, on the nodes they ran on.

use std::collections::{BTreeMap, VecDeque};

use karpenter_core::ports::ClusterEvent;
use tokio::time::Instant;

use super::{ClusterState, SimCluster};

/// The workload a simulated pod's name says it belongs to: `namespace/<owner>-<NNNNNN>`.
fn owner_of(name: &str) -> Option<&str> {
    let (_, name) = name.split_once('/')?;
    let (owner, number) = name.rsplit_once('-')?;
    (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())).then_some(owner)
}

/// The number in a simulated pod's UID (`uid-NNNNNN`).
fn uid_number(uid: &str) -> Option<u64> {
    uid.strip_prefix("uid-")?.parse().ok()
}

/// Identities a restarted cluster gives back to the pods its workloads recreate, oldest
/// first per workload.
#[derive(Debug, Default)]
pub(super) struct Identities {
    by_owner: BTreeMap<String, VecDeque<(String, String)>>,
}

impl Identities {
    /// How many pods of `owner` the journal knew.
    fn count(&self, owner: &str) -> usize {
        self.by_owner.get(owner).map_or(0, VecDeque::len)
    }

    /// The next identity for a pod of `owner`, as `(uid, name)`.
    pub(super) fn take(&mut self, owner: &str) -> Option<(String, String)> {
        self.by_owner.get_mut(owner)?.pop_front()
    }
}

impl SimCluster {
    /// Before the workloads are seeded on resume: the pods they create take the identities
    /// of the pods the journal knew (`uid` → `namespace/name`), and new pods number on from
    /// the highest UID seen.
    pub fn reuse_identities(&self, names: &BTreeMap<String, String>) {
        let mut state = self.lock();
        let mut by_owner: BTreeMap<String, VecDeque<(String, String)>> = BTreeMap::new();
        for (uid, name) in names {
            if let Some(n) = uid_number(uid) {
                state.next_uid = state.next_uid.max(n + 1);
            }
            let (Some(owner), Some((_, pod_name))) = (owner_of(name), name.split_once('/')) else {
                continue;
            };
            by_owner
                .entry(owner.to_owned())
                .or_default()
                .push_back((uid.clone(), pod_name.to_owned()));
        }
        state.identities = Identities { by_owner };
    }

    /// How many pods of `owner` (a deployment or a job) the resumed journal knew.
    pub fn known_pods(&self, owner: &str) -> usize {
        self.lock().identities.count(owner)
    }

    /// After the workloads are seeded on resume: the journal's pods they did not recreate
    /// (their deployment scaled down, their job ended) are reported deleted, so that the
    /// journal does not keep them pending or bound for ever. Returns how many.
    pub fn forget_unused_identities(&self) -> usize {
        let unused: Vec<String> = {
            let mut state = self.lock();
            std::mem::take(&mut state.identities)
                .by_owner
                .into_values()
                .flatten()
                .map(|(uid, _)| uid)
                .collect()
        };
        let count = unused.len();
        for uid in unused {
            self.send(ClusterEvent::PodDeleted { uid });
        }
        count
    }

    /// Once the nodes are back: each pod the journal last saw bound (`uid` → node) runs on
    /// that node again if the node is back and the pod still fits there (otherwise it stays
    /// pending for the kube-scheduler stand-in). Returns how many were bound.
    pub fn rebind(&self, bound: &BTreeMap<String, String>) -> usize {
        let now = Instant::now();
        let mut out = Vec::new();
        {
            let mut guard = self.lock();
            let state: &mut ClusterState = &mut guard;
            for (uid, node_name) in bound {
                let (Some(pod), Some(node)) =
                    (state.pods.get_mut(uid), state.nodes.get_mut(node_name))
                else {
                    continue;
                };
                let requested = node.info.requested.add(&pod.pod.requests);
                if pod.node.is_some() || !requested.fits_in(&node.info.allocatable) {
                    continue;
                }
                node.info.requested = requested;
                pod.node = Some(node_name.clone());
                pod.started = Some(now);
                out.push(ClusterEvent::PodBound {
                    uid: uid.clone(),
                    pod: format!("{}/{}", pod.pod.namespace, pod.pod.name),
                    node: node_name.clone(),
                });
            }
        }
        let count = out.len();
        for event in out {
            self.send(event);
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_come_from_simulated_names_only() {
        assert_eq!(owner_of("default/web-000025"), Some("web"));
        assert_eq!(owner_of("batch/etl-nightly-000003"), Some("etl-nightly"));
        assert_eq!(owner_of("default/web-abc"), None);
        assert_eq!(owner_of("web-000025"), None);
        assert_eq!(owner_of("default/web-"), None);
        assert_eq!(uid_number("uid-000042"), Some(42));
        assert_eq!(uid_number("3f2a-uid"), None);
    }
}
