//! What the watch streams mean for the actors, decided without I/O: which pods became
//! provisionable, bound or gone, which Node registered for which NodeClaim, when it
//! initialized, and which NodeClaims or Nodes were deleted. It remembers what it has reported,
//! so a watch that restarts (a relist after `410 Gone` or a dropped connection) reports only
//! what changed and reports everything that vanished meanwhile as deleted: nothing is lost
//! and nothing is reported twice.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod as KubePod};
use karpenter_core::api::NodeClaim;
use karpenter_core::api::nodeclaim::condition;
use karpenter_core::api::registration::initialized;
use karpenter_core::model::pod::provisionable;
use karpenter_core::vocab::labels;

use super::convert::{node_of, provider_id};

/// What the actors are told.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// kube-scheduler could not place this pod and it is ours to provision for.
    PodUnschedulable(Box<KubePod>),
    /// A pod was bound to a node.
    PodBound {
        /// Pod UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// Node.
        node: String,
    },
    /// A pod is gone (deleted, finished, or vanished while the watch was down).
    PodDeleted {
        /// Pod UID.
        uid: String,
    },
    /// A Node with the provider id of a NodeClaim's instance joined.
    NodeRegistered {
        /// NodeClaim.
        nodeclaim: String,
        /// Node.
        node: String,
    },
    /// A registered Node initialized (Ready, startup taints gone, resources present).
    NodeInitialized {
        /// NodeClaim.
        nodeclaim: String,
        /// Node.
        node: String,
    },
    /// A NodeClaim, or the Node of one, is being deleted: drain and terminate it.
    NodeClaimDeleting {
        /// NodeClaim.
        nodeclaim: String,
        /// When the deleted object's deletion was requested (ms since the Unix epoch): the
        /// terminationGracePeriod counts from then.
        since_ms: Option<i64>,
    },
    /// A NodePool was created, changed or deleted (the cache has it already).
    NodePoolsChanged,
    /// A registered Node vanished without its NodeClaim terminating it.
    NodeGone {
        /// NodeClaim.
        nodeclaim: String,
        /// Node.
        node: String,
    },
}

/// The watch translator's memory. Feed it every watch event in order.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Pods reported unschedulable and not bound since.
    pending: BTreeSet<String>,
    /// Pods reported bound, with their node.
    bound: BTreeMap<String, String>,
    /// Registered Nodes and their NodeClaim.
    registered: BTreeMap<String, String>,
    /// Nodes with a provider id no NodeClaim has claimed yet.
    unmatched: BTreeMap<String, String>,
    /// Nodes reported initialized.
    initialized: BTreeSet<String>,
    /// NodeClaims reported as deleting.
    deleting: BTreeSet<String>,
    /// What each stream's current relist has shown so far.
    relist_pods: Option<BTreeSet<String>>,
    relist_nodes: Option<BTreeSet<String>>,
}

fn uid(pod: &KubePod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

impl Tracker {
    /// A pod watch (re)started listing: pods it does not list again are gone.
    pub fn pods_relisting(&mut self) {
        self.relist_pods = Some(BTreeSet::new());
    }

    /// The pod relist is complete.
    pub fn pods_relisted(&mut self) -> Vec<Signal> {
        let Some(seen) = self.relist_pods.take() else {
            return Vec::new();
        };
        let known: BTreeSet<String> = self
            .pending
            .iter()
            .chain(self.bound.keys())
            .cloned()
            .collect();
        known
            .difference(&seen)
            .filter_map(|uid| self.pod_gone(uid))
            .collect()
    }

    fn pod_gone(&mut self, uid: &str) -> Option<Signal> {
        let was_pending = self.pending.remove(uid);
        let was_bound = self.bound.remove(uid).is_some();
        (was_pending || was_bound).then(|| Signal::PodDeleted {
            uid: uid.to_owned(),
        })
    }

    /// A pod was added or changed.
    pub fn pod_applied(&mut self, pod: &KubePod) -> Vec<Signal> {
        let uid = uid(pod);
        if let Some(seen) = &mut self.relist_pods {
            seen.insert(uid.clone());
        }
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if pod.metadata.deletion_timestamp.is_some() || finished {
            return self.pod_gone(&uid).into_iter().collect();
        }
        if let Some(node) = node_of(pod) {
            self.pending.remove(&uid);
            if self.bound.get(&uid).is_some_and(|n| n == node) {
                return Vec::new();
            }
            self.bound.insert(uid.clone(), node.to_owned());
            return vec![Signal::PodBound {
                uid,
                pod: format!(
                    "{}/{}",
                    pod.metadata.namespace.as_deref().unwrap_or("default"),
                    name_of(&pod.metadata)
                ),
                node: node.to_owned(),
            }];
        }
        if provisionable(pod).is_ok() && self.pending.insert(uid) {
            return vec![Signal::PodUnschedulable(Box::new(pod.clone()))];
        }
        Vec::new()
    }

    /// A pod was deleted.
    pub fn pod_deleted(&mut self, pod: &KubePod) -> Vec<Signal> {
        self.pod_gone(&uid(pod)).into_iter().collect()
    }

    /// A node watch (re)started listing.
    pub fn nodes_relisting(&mut self) {
        self.relist_nodes = Some(BTreeSet::new());
    }

    /// The node relist is complete: registered nodes it did not list are gone.
    pub fn nodes_relisted(&mut self) -> Vec<Signal> {
        let Some(seen) = self.relist_nodes.take() else {
            return Vec::new();
        };
        let gone: Vec<String> = self
            .registered
            .keys()
            .chain(self.unmatched.keys())
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        gone.iter().flat_map(|n| self.node_gone(n)).collect()
    }

    fn node_gone(&mut self, node: &str) -> Option<Signal> {
        self.unmatched.remove(node);
        self.initialized.remove(node);
        let nodeclaim = self.registered.remove(node)?;
        Some(Signal::NodeGone {
            nodeclaim,
            node: node.to_owned(),
        })
    }

    /// A Node was added or changed; `claims` looks NodeClaims up by name, `by_provider_id`
    /// finds the one whose instance has that provider id.
    pub fn node_applied(
        &mut self,
        node: &Node,
        claim: impl Fn(&str) -> Option<NodeClaim>,
        by_provider_id: impl Fn(&str) -> Option<NodeClaim>,
    ) -> Vec<Signal> {
        let name = name_of(&node.metadata);
        if let Some(seen) = &mut self.relist_nodes {
            seen.insert(name.clone());
        }
        let mut out = Vec::new();
        if !self.registered.contains_key(&name) {
            let Some(pid) = provider_id(node) else {
                return out;
            };
            match by_provider_id(pid) {
                Some(c) => {
                    let nodeclaim = name_of(&c.metadata);
                    self.unmatched.remove(&name);
                    self.registered.insert(name.clone(), nodeclaim.clone());
                    out.push(Signal::NodeRegistered {
                        nodeclaim,
                        node: name.clone(),
                    });
                }
                None => {
                    self.unmatched.insert(name.clone(), pid.to_owned());
                    return out;
                }
            }
        }
        let Some(nodeclaim) = self.registered.get(&name).cloned() else {
            return out;
        };
        let ours = node
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == labels::TERMINATION_FINALIZER);
        if let (Some(since), true) = (&node.metadata.deletion_timestamp, ours) {
            if self.deleting.insert(nodeclaim.clone()) {
                out.push(Signal::NodeClaimDeleting {
                    nodeclaim,
                    since_ms: Some(since.0.as_millisecond()),
                });
            }
            return out;
        }
        if !self.initialized.contains(&name)
            && let Some(c) = claim(&nodeclaim)
            && c.condition_is_true(condition::REGISTERED)
            && initialized(&c, node).is_ok()
        {
            self.initialized.insert(name.clone());
            out.push(Signal::NodeInitialized {
                nodeclaim,
                node: name,
            });
        }
        out
    }

    /// A Node was deleted.
    pub fn node_deleted(&mut self, node: &Node) -> Vec<Signal> {
        self.node_gone(&name_of(&node.metadata))
            .into_iter()
            .collect()
    }

    /// A NodeClaim was added or changed; `node` looks Nodes up by name (for the Nodes that
    /// joined before the NodeClaim knew its instance, and for initialization).
    pub fn nodeclaim_applied(
        &mut self,
        claim: &NodeClaim,
        node: impl Fn(&str) -> Option<Node>,
    ) -> Vec<Signal> {
        let name = name_of(&claim.metadata);
        let mut out = Vec::new();
        if let Some(since) = &claim.metadata.deletion_timestamp {
            if self.deleting.insert(name.clone()) {
                out.push(Signal::NodeClaimDeleting {
                    nodeclaim: name,
                    since_ms: Some(since.0.as_millisecond()),
                });
            }
            return out;
        }
        let pid = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
        let waiting = self
            .unmatched
            .iter()
            .find(|(_, p)| Some(p.as_str()) == pid)
            .map(|(n, _)| n.clone());
        let registered_node = self
            .registered
            .iter()
            .find(|(_, c)| **c == name)
            .map(|(n, _)| n.clone());
        if let Some(n) = waiting.or(registered_node)
            && let Some(node) = node(&n)
        {
            let claim = claim.clone();
            out.extend(self.node_applied(&node, |_| Some(claim.clone()), |_| Some(claim.clone())));
        }
        out
    }

    /// A NodeClaim object is gone for good: forget it.
    pub fn nodeclaim_deleted(&mut self, claim: &NodeClaim) {
        self.deleting.remove(&name_of(&claim.metadata));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn pending_pod(uid: &str) -> KubePod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap()
    }

    fn bound(mut pod: KubePod, node: &str) -> KubePod {
        pod.spec.as_mut().unwrap().node_name = Some(node.into());
        pod
    }

    fn node(name: &str, pid: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": pid},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn claim(name: &str, pid: Option<&str>, registered: bool) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": pid}
        }))
        .unwrap();
        if registered {
            c.set_condition(
                condition::REGISTERED,
                true,
                "Registered",
                "",
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        c
    }

    #[test]
    fn a_pod_is_reported_once_then_bound_then_gone() {
        let mut t = Tracker::default();
        let pod = pending_pod("u1");
        assert!(matches!(
            t.pod_applied(&pod)[..],
            [Signal::PodUnschedulable(_)]
        ));
        assert!(t.pod_applied(&pod).is_empty(), "not twice");
        let on_node = bound(pod, "n1");
        assert_eq!(
            t.pod_applied(&on_node),
            vec![Signal::PodBound {
                uid: "u1".into(),
                pod: "default/u1".into(),
                node: "n1".into()
            }]
        );
        assert!(t.pod_applied(&on_node).is_empty());
        assert_eq!(
            t.pod_deleted(&on_node),
            vec![Signal::PodDeleted { uid: "u1".into() }]
        );
        assert!(t.pod_deleted(&on_node).is_empty());
    }

    #[test]
    fn a_relist_reports_only_changes_and_what_vanished() {
        let mut t = Tracker::default();
        t.pod_applied(&pending_pod("u1"));
        t.pod_applied(&pending_pod("u2"));
        // The watch broke; meanwhile u2 was deleted and u3 appeared.
        t.pods_relisting();
        assert!(t.pod_applied(&pending_pod("u1")).is_empty());
        assert_eq!(t.pod_applied(&pending_pod("u3")).len(), 1);
        assert_eq!(
            t.pods_relisted(),
            vec![Signal::PodDeleted { uid: "u2".into() }]
        );
        assert!(t.pods_relisted().is_empty());
    }

    #[test]
    fn a_node_registers_when_its_nodeclaim_knows_the_instance_in_either_order() {
        let mut t = Tracker::default();
        let n = node("n1", "aws:///z/i-1", false);
        // The Node joins before the NodeClaim's status has the provider id.
        assert!(t.node_applied(&n, |_| None, |_| None).is_empty());
        let c = claim("pool-a", Some("aws:///z/i-1"), false);
        assert_eq!(
            t.nodeclaim_applied(&c, |_| Some(n.clone())),
            vec![Signal::NodeRegistered {
                nodeclaim: "pool-a".into(),
                node: "n1".into()
            }]
        );
        // Registered by the actor, then Ready: initialized, once.
        let c = claim("pool-a", Some("aws:///z/i-1"), true);
        let ready = node("n1", "aws:///z/i-1", true);
        let signals = t.node_applied(&ready, |_| Some(c.clone()), |_| Some(c.clone()));
        assert_eq!(
            signals,
            vec![Signal::NodeInitialized {
                nodeclaim: "pool-a".into(),
                node: "n1".into()
            }]
        );
        assert!(
            t.node_applied(&ready, |_| Some(c.clone()), |_| Some(c.clone()))
                .is_empty()
        );
        // The Node vanishes during a watch outage.
        t.nodes_relisting();
        assert_eq!(
            t.nodes_relisted(),
            vec![Signal::NodeGone {
                nodeclaim: "pool-a".into(),
                node: "n1".into()
            }]
        );
    }

    #[test]
    fn deleting_a_nodeclaim_or_its_node_is_reported_once() {
        let mut t = Tracker::default();
        let mut c = claim("pool-a", Some("aws:///z/i-1"), true);
        let n = node("n1", "aws:///z/i-1", false);
        t.node_applied(&n, |_| Some(c.clone()), |_| Some(c.clone()));
        let mut deleting = n.clone();
        deleting.metadata.deletion_timestamp = c.metadata.creation_timestamp.clone().or(Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        ));
        deleting.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.into()]);
        assert_eq!(
            t.node_applied(&deleting, |_| Some(c.clone()), |_| None),
            vec![Signal::NodeClaimDeleting {
                nodeclaim: "pool-a".into(),
                since_ms: Some(0),
            }]
        );
        c.metadata.deletion_timestamp = deleting.metadata.deletion_timestamp.clone();
        assert!(
            t.nodeclaim_applied(&c, |_| None).is_empty(),
            "already reported"
        );
    }
}
