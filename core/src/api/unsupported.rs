//! Fields the CRDs accept, as upstream's accept them, that karpenter-rs does not act on yet.
//! Each is reported where its object is (a condition and a Warning Event naming the field),
//! never silently ignored; one that changes what the object means also keeps the object from
//! being used.

use super::{EC2NodeClass, NodeOverlay, NodePool};

/// The condition that lists an object's fields not acted on.
pub const CONDITION: &str = "UnsupportedFields";
/// The reason of that condition, and of the Event.
pub const REASON: &str = "UnsupportedField";

/// One field not acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// The field path (`spec.replicas`).
    pub field: &'static str,
    /// What karpenter-rs does instead, for the user.
    pub message: &'static str,
    /// Acting as if the field were not there would do what the user did not ask for, so the
    /// object is not used at all.
    pub blocks: bool,
}

impl Unsupported {
    /// `field: message`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// The NodePool's fields not acted on: none since static NodePools (`spec.replicas`) and
/// Balanced consolidation are (the condition an earlier version set is then removed).
pub fn nodepool(_pool: &NodePool) -> Vec<Unsupported> {
    Vec::new()
}

/// The EC2NodeClass's fields not acted on: none since capacity reservations are (the
/// condition an earlier version set is then removed).
pub fn ec2nodeclass(_class: &EC2NodeClass) -> Vec<Unsupported> {
    Vec::new()
}

/// The fields of a NodeOverlay karpenter-rs does not act on: none since capacity is
/// applied (the condition an earlier version set is then removed).
pub fn nodeoverlay(_overlay: &NodeOverlay) -> Vec<Unsupported> {
    Vec::new()
}

/// The message of the condition or Event for `fields`.
pub fn summary(fields: &[Unsupported]) -> String {
    let described: Vec<String> = fields.iter().map(Unsupported::describe).collect();
    described.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::{KarpenterObject, ManifestChecker};

    fn pool(extra: &str) -> NodePool {
        let yaml = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}\n      requirements: []\n{extra}"
        );
        let reports = ManifestChecker::new().expect("crds").check_str(&yaml);
        match reports.into_iter().next().and_then(|r| r.object) {
            Some(KarpenterObject::NodePool(p)) => *p,
            other => panic!("not a valid NodePool: {other:?}"),
        }
    }

    #[test]
    fn static_pools_and_balanced_consolidation_are_not_reported() {
        assert_eq!(nodepool(&pool("")), Vec::new());
        let balanced = "  disruption: {consolidateAfter: 0s, consolidationPolicy: Balanced}\n";
        assert_eq!(nodepool(&pool(balanced)), Vec::new());
        let static_pool = pool(&format!(
            "  replicas: 3\n  limits: {{nodes: \"5\"}}\n{balanced}"
        ));
        assert_eq!(nodepool(&static_pool), Vec::new());
        assert_eq!(static_pool.node_limit(), Some(5));
    }

    #[test]
    fn a_static_pool_limiting_more_than_its_node_count_is_refused_naming_the_rule() {
        let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  replicas: 3\n  limits: {cpu: \"100\"}\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}\n      requirements: []\n";
        let reports = ManifestChecker::new().expect("crds").check_str(yaml);
        let problems = format!("{:?}", reports[0].problems);
        assert!(reports[0].object.is_none(), "{problems}");
        assert!(
            problems.contains("only 'limits.nodes' is supported on static NodePools"),
            "{problems}"
        );
    }
}
