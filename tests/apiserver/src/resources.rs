//! The resource types the server serves, as discovery lists them.

/// What happens to `status` in a create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOnCreate {
    /// Kept as sent (nodes: the kubelet registers with its status).
    Keep,
    /// Dropped (custom resources with a status subresource).
    Drop,
    /// Reset to `{"phase": "Pending"}` (pods).
    Pending,
}

/// One served resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural, as in URLs.
    pub plural: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (the main resource then ignores status changes).
    pub status: bool,
    /// What a create does with `status`.
    pub status_on_create: StatusOnCreate,
}

impl ResourceType {
    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// A type's status: whether it has a `/status` subresource, and what a create does with it.
#[derive(Clone, Copy)]
enum Status {
    /// No subresource: status is an ordinary field.
    Field,
    /// A subresource, with this rule on create.
    Subresource(StatusOnCreate),
}

const fn served(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: Status,
) -> ResourceType {
    let (status, status_on_create) = match status {
        Status::Field => (false, StatusOnCreate::Keep),
        Status::Subresource(on_create) => (true, on_create),
    };
    ResourceType {
        group,
        version,
        kind,
        plural,
        namespaced,
        status,
        status_on_create,
    }
}

const FIELD: Status = Status::Field;
const KEEP: Status = Status::Subresource(StatusOnCreate::Keep);
const DROP: Status = Status::Subresource(StatusOnCreate::Drop);
const PENDING: Status = Status::Subresource(StatusOnCreate::Pending);

/// Positions in [`TYPES`] of the types the server itself reads.
pub const PODS: usize = 0;
/// See [`PODS`].
pub const NAMESPACES: usize = 2;
/// See [`PODS`].
pub const PODDISRUPTIONBUDGETS: usize = 12;

/// Every type served: what the Kubernetes adapter watches and writes, and what installing
/// the chart applies.
pub const TYPES: &[ResourceType] = &[
    served("", "v1", "Pod", "pods", true, PENDING),
    served("", "v1", "Node", "nodes", false, KEEP),
    served("", "v1", "Namespace", "namespaces", false, KEEP),
    served("", "v1", "Event", "events", true, FIELD),
    served("", "v1", "ConfigMap", "configmaps", true, FIELD),
    served("", "v1", "Secret", "secrets", true, FIELD),
    served("", "v1", "Service", "services", true, KEEP),
    served("", "v1", "ServiceAccount", "serviceaccounts", true, FIELD),
    served(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        KEEP,
    ),
    served(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        KEEP,
    ),
    served("apps", "v1", "DaemonSet", "daemonsets", true, KEEP),
    served("apps", "v1", "Deployment", "deployments", true, KEEP),
    served(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        KEEP,
    ),
    served(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        FIELD,
    ),
    served("storage.k8s.io", "v1", "CSINode", "csinodes", false, FIELD),
    served(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
        KEEP,
    ),
    served("coordination.k8s.io", "v1", "Lease", "leases", true, FIELD),
    served("events.k8s.io", "v1", "Event", "events", true, FIELD),
    served(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        FIELD,
    ),
    served(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        FIELD,
    ),
    served(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        FIELD,
    ),
    served(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        FIELD,
    ),
    served(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        KEEP,
    ),
    served("karpenter.sh", "v1", "NodePool", "nodepools", false, DROP),
    served("karpenter.sh", "v1", "NodeClaim", "nodeclaims", false, DROP),
    served(
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
        "ec2nodeclasses",
        false,
        DROP,
    ),
];

/// Short names kubectl accepts for a plural (`kubectl get ns`).
pub fn short_names(plural: &str) -> &'static [&'static str] {
    match plural {
        "pods" => &["po"],
        "nodes" => &["no"],
        "namespaces" => &["ns"],
        "events" => &["ev"],
        "configmaps" => &["cm"],
        "services" => &["svc"],
        "serviceaccounts" => &["sa"],
        "persistentvolumeclaims" => &["pvc"],
        "persistentvolumes" => &["pv"],
        "daemonsets" => &["ds"],
        "deployments" => &["deploy"],
        "poddisruptionbudgets" => &["pdb"],
        "storageclasses" => &["sc"],
        "customresourcedefinitions" => &["crd", "crds"],
        _ => &[],
    }
}

/// The type served at `group`/`version` under `plural`, with its index in [`TYPES`].
pub fn find(group: &str, version: &str, plural: &str) -> Option<(usize, &'static ResourceType)> {
    TYPES
        .iter()
        .enumerate()
        .find(|(_, t)| t.group == group && t.version == version && t.plural == plural)
}

/// The groups served, each with its versions, in the order discovery lists them.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for t in TYPES.iter().filter(|t| !t.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) if versions.contains(&t.version) => {}
            Some((_, versions)) => versions.push(t.version),
            None => groups.push((t.group, vec![t.version])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_positions_point_at_their_types() {
        assert_eq!(TYPES[PODS].plural, "pods");
        assert_eq!(TYPES[NAMESPACES].plural, "namespaces");
        assert_eq!(TYPES[PODDISRUPTIONBUDGETS].plural, "poddisruptionbudgets");
        assert_eq!(find("", "v1", "pods").map(|(i, _)| i), Some(PODS));
    }
}
