//! Migrating to karpenter-rs. From Cluster Autoscaler: NodePools proposed from the node
//! groups ([`cluster_autoscaler`]).
//!
//! Taking over from upstream Karpenter: what karpenter-rs would do with the objects a cluster
//! holds (`karpenter migrate from-karpenter --dry-run`), decided from them alone. The switch
//! itself is stopping upstream and starting `karpenter controller`, which adopts each
//! NodeClaim in place ([`crate::recovery::plan_adoption`]) and re-stamps upstream's template
//! hashes, so nothing is drifted by the switch.

pub mod cluster_autoscaler;

use std::fmt::Write as _;

use crate::api::nodeclaim::foreign_pool_hash;
use crate::api::{EC2NodeClass, NodeClaim, NodePool, unsupported};
use crate::events::NodeClaimState;
use crate::recovery::recorded_state;
use crate::vocab::labels;

/// What the takeover does with one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAction {
    /// Adopted in place with its instance and node.
    Adopt,
    /// Never launched: deleted, and its pods planned again.
    Delete,
}

/// One NodeClaim and its fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Name.
    pub name: String,
    /// Its NodePool, from its label.
    pub nodepool: String,
    /// How far it got, from its conditions.
    pub state: NodeClaimState,
    /// Its instance's provider id, if recorded.
    pub provider_id: Option<String>,
    /// Its node, if registered.
    pub node: Option<String>,
    /// What happens to it.
    pub action: ClaimAction,
    /// Hashes another controller stamped, which are re-stamped (`NodePool v3`, …).
    pub restamped: Vec<String>,
    /// Its NodePool is not in the cluster.
    pub orphaned: bool,
    /// Being deleted already: its drain goes on under karpenter-rs.
    pub deleting: bool,
}

/// A NodePool or EC2NodeClass and what karpenter-rs makes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVerdict {
    /// `NodePool/name` or `EC2NodeClass/name`.
    pub object: String,
    /// Fields not acted on, described; a blocking one keeps the object from being used.
    pub unsupported: Vec<String>,
    /// Whether an unsupported field keeps it from being used.
    pub blocked: bool,
}

/// The takeover of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FromKarpenter {
    /// NodePools and EC2NodeClasses.
    pub objects: Vec<ObjectVerdict>,
    /// Every NodeClaim.
    pub nodeclaims: Vec<ClaimPlan>,
    /// Pods kube-scheduler could not place, served once karpenter-rs leads.
    pub pending_pods: usize,
}

/// Decides the takeover of a cluster holding these objects.
pub fn from_karpenter(
    pools: &[NodePool],
    classes: &[EC2NodeClass],
    claims: &[NodeClaim],
    pending_pods: usize,
) -> FromKarpenter {
    let mut objects = Vec::new();
    for pool in pools {
        let fields = unsupported::nodepool(pool);
        objects.push(ObjectVerdict {
            object: format!("NodePool/{}", pool.metadata.name.as_deref().unwrap_or("")),
            blocked: fields.iter().any(|f| f.blocks),
            unsupported: fields
                .iter()
                .map(unsupported::Unsupported::describe)
                .collect(),
        });
    }
    for class in classes {
        let fields = unsupported::ec2nodeclass(class);
        objects.push(ObjectVerdict {
            object: format!(
                "EC2NodeClass/{}",
                class.metadata.name.as_deref().unwrap_or("")
            ),
            blocked: fields.iter().any(|f| f.blocks),
            unsupported: fields
                .iter()
                .map(unsupported::Unsupported::describe)
                .collect(),
        });
    }
    let nodeclaims = claims
        .iter()
        .map(|claim| {
            let nodepool = claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                .cloned()
                .unwrap_or_default();
            let state = recorded_state(claim);
            let mut restamped = Vec::new();
            if let Some(version) = foreign_pool_hash(claim) {
                restamped.push(format!("NodePool hash {version}"));
            }
            let ours = crate::api::ec2nodeclass::EC2NODECLASS_HASH_VERSION;
            match crate::ports::NodeClassHash::stamped_on(claim) {
                Some(hash) if hash.version == ours => {}
                Some(hash) => restamped.push(format!("EC2NodeClass hash {}", hash.version)),
                None => restamped.push("EC2NodeClass hash none".into()),
            }
            let status = claim.status.as_ref();
            ClaimPlan {
                name: claim.metadata.name.clone().unwrap_or_default(),
                orphaned: !pools
                    .iter()
                    .any(|p| p.metadata.name.as_deref() == Some(nodepool.as_str())),
                nodepool,
                state,
                provider_id: status.and_then(|s| s.provider_id.clone()),
                node: status.and_then(|s| s.node_name.clone()),
                action: if state == NodeClaimState::Pending {
                    ClaimAction::Delete
                } else {
                    ClaimAction::Adopt
                },
                restamped,
                deleting: claim.metadata.deletion_timestamp.is_some(),
            }
        })
        .collect();
    FromKarpenter {
        objects,
        nodeclaims,
        pending_pods,
    }
}

impl FromKarpenter {
    /// NodeClaims adopted in place.
    pub fn adopted(&self) -> usize {
        self.nodeclaims
            .iter()
            .filter(|c| c.action == ClaimAction::Adopt)
            .count()
    }

    /// The report `migrate from-karpenter --dry-run` prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Taking over from Karpenter (dry run: nothing was changed)\n"
        );
        let _ = writeln!(out, "NodePools and EC2NodeClasses:");
        if self.objects.is_empty() {
            let _ = writeln!(out, "  none: karpenter-rs would provision nothing");
        }
        for object in &self.objects {
            let verdict = match (object.unsupported.is_empty(), object.blocked) {
                (true, _) => "used as it is".to_owned(),
                (false, false) => format!("used; not acted on: {}", object.unsupported.join("; ")),
                (false, true) => format!("NOT used: {}", object.unsupported.join("; ")),
            };
            let _ = writeln!(out, "  {}: {verdict}", object.object);
        }
        let _ = writeln!(
            out,
            "\nNodeClaims: {} ({} adopted in place, {} deleted; no node is replaced by the switch)",
            self.nodeclaims.len(),
            self.adopted(),
            self.nodeclaims.len() - self.adopted()
        );
        for claim in &self.nodeclaims {
            let mut line = format!("  {} ({}, {:?})", claim.name, claim.nodepool, claim.state);
            match claim.action {
                ClaimAction::Adopt => {
                    line.push_str(": adopted with ");
                    line.push_str(
                        claim
                            .provider_id
                            .as_deref()
                            .unwrap_or("the instance tagged with its name"),
                    );
                    if let Some(node) = &claim.node {
                        let _ = write!(line, " and node {node}");
                    }
                    if !claim.restamped.is_empty() {
                        let _ = write!(
                            line,
                            "; {} re-stamped with the templates as they are (the switch drifts nothing; later changes do)",
                            claim.restamped.join(", ")
                        );
                    }
                    if claim.deleting {
                        line.push_str("; being deleted: its drain goes on");
                    }
                    if claim.orphaned {
                        line.push_str("; its NodePool is not in the cluster");
                    }
                }
                ClaimAction::Delete => {
                    line.push_str(": never launched; deleted, its pods planned again");
                }
            }
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(
            out,
            "\nPending pods: {} (planned in karpenter-rs's first round once it leads)",
            self.pending_pods
        );
        let _ = writeln!(
            out,
            "\nThe switch:\n  1. stop upstream: kubectl -n kube-system scale deployment/karpenter --replicas 0\n  2. install karpenter-rs: karpenter install | kubectl apply -f - (its CRDs replace upstream's: same group, kinds and versions)\n  3. start it: each NodeClaim above is adopted with its instance before any pending pod is planned\n  If EC2 no longer has an instance, its NodeClaim is finalized instead of adopted."
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, conditions: &[&str], annotations: serde_json::Value) -> NodeClaim {
        let conditions: Vec<serde_json::Value> = conditions
            .iter()
            .map(|c| serde_json::json!({"type": c, "status": "True", "reason": c, "message": "", "lastTransitionTime": "2026-11-20T10:00:00Z"}))
            .collect();
        let launched = !conditions.is_empty();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "general"}, "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": if launched {
                serde_json::json!({"providerID": "aws:///us-west-2a/i-1", "nodeName": "ip-1", "conditions": conditions})
            } else {
                serde_json::json!({})
            }
        }))
        .unwrap()
    }

    fn pool(name: &str) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}}
        }))
        .unwrap()
    }

    #[test]
    fn launched_claims_are_adopted_with_upstreams_hashes_restamped_and_pending_ones_deleted() {
        let upstream = serde_json::json!({
            "karpenter.sh/nodepool-hash": "1", "karpenter.sh/nodepool-hash-version": "v3",
            "karpenter.k8s.aws/ec2nodeclass-hash": "2", "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6"
        });
        let plan = from_karpenter(
            &[pool("general")],
            &[],
            &[
                claim(
                    "general-a",
                    &["Launched", "Registered", "Initialized"],
                    upstream.clone(),
                ),
                claim("general-b", &[], upstream),
            ],
            3,
        );
        assert_eq!(plan.adopted(), 1);
        let adopted = &plan.nodeclaims[0];
        assert_eq!(adopted.state, NodeClaimState::Initialized);
        assert_eq!(
            adopted.restamped,
            ["NodePool hash v3", "EC2NodeClass hash v6"]
        );
        assert!(!adopted.orphaned);
        assert_eq!(plan.nodeclaims[1].action, ClaimAction::Delete);
        let text = plan.render();
        for line in [
            "NodePool/general: used as it is",
            "NodeClaims: 2 (1 adopted in place, 1 deleted; no node is replaced by the switch)",
            "general-a (general, Initialized): adopted with aws:///us-west-2a/i-1 and node ip-1; NodePool hash v3, EC2NodeClass hash v6 re-stamped",
            "general-b (general, Pending): never launched; deleted",
            "Pending pods: 3",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_claim_of_a_missing_pool_is_named_and_a_static_pool_is_used() {
        let mut static_pool = pool("static");
        static_pool.spec.replicas = Some(3);
        let plan = from_karpenter(
            &[static_pool],
            &[],
            &[claim("general-a", &["Launched"], serde_json::json!({}))],
            0,
        );
        assert!(plan.nodeclaims[0].orphaned);
        let text = plan.render();
        assert!(text.contains("NodePool/static: used as it is"), "{text}");
        assert!(
            text.contains("its NodePool is not in the cluster"),
            "{text}"
        );
        assert!(
            text.contains("NodePool hash none, EC2NodeClass hash none re-stamped"),
            "{text}"
        );
    }
}
