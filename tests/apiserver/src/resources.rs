//! The resource types the server serves: the built-in ones, and those CustomResourceDefinitions
//! add while it runs, as discovery lists them.

use std::sync::Arc;

use kube_admission::object::Admission;

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
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural, as in URLs.
    pub plural: String,
    /// Short names kubectl accepts (`ns`).
    pub short_names: Vec<String>,
    /// Categories (`kubectl get karpenter`).
    pub categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (the main resource then ignores status changes).
    pub status: bool,
    /// What a create does with `status`.
    pub status_on_create: StatusOnCreate,
    /// The `scale` subresource its CRD declares, if any.
    pub scale: Option<crate::scale::ScalePaths>,
    /// For custom resources: how objects are admitted (pruned, defaulted, validated).
    pub admission: Option<Arc<Admission>>,
    /// Served; custom resource types stop being served when their CRD goes.
    pub served: bool,
}

impl ResourceType {
    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `Kind.group`, as `422 Invalid` messages name it (`Pod` for the core group).
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
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

const FIELD: Status = Status::Field;
const KEEP: Status = Status::Subresource(StatusOnCreate::Keep);
const PENDING: Status = Status::Subresource(StatusOnCreate::Pending);

/// Positions in [`builtin`] of the types the server itself reads.
pub const PODS: usize = 0;
/// See [`PODS`].
pub const NODES: usize = 1;
/// See [`PODS`].
pub const NAMESPACES: usize = 2;
/// See [`PODS`].
pub const PODDISRUPTIONBUDGETS: usize = 12;
/// See [`PODS`].
pub const CUSTOMRESOURCEDEFINITIONS: usize = 22;
/// See [`PODS`].
pub const PRIORITYCLASSES: usize = 23;

/// The built-in types: what the Kubernetes adapter watches and writes, and what installing the
/// chart applies.
/// Group, version, kind, plural, namespaced, status subresource, short names.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    Status,
    &'static [&'static str],
);

const BUILTIN: &[Builtin] = &[
    ("", "v1", "Pod", "pods", true, PENDING, &["po"]),
    ("", "v1", "Node", "nodes", false, KEEP, &["no"]),
    ("", "v1", "Namespace", "namespaces", false, KEEP, &["ns"]),
    ("", "v1", "Event", "events", true, FIELD, &["ev"]),
    ("", "v1", "ConfigMap", "configmaps", true, FIELD, &["cm"]),
    ("", "v1", "Secret", "secrets", true, FIELD, &[]),
    ("", "v1", "Service", "services", true, KEEP, &["svc"]),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        FIELD,
        &["sa"],
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        KEEP,
        &["pvc"],
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        false,
        KEEP,
        &["pv"],
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", true, KEEP, &["ds"]),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        KEEP,
        &["deploy"],
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        KEEP,
        &["pdb"],
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
        FIELD,
        &["sc"],
    ),
    (
        "storage.k8s.io",
        "v1",
        "CSINode",
        "csinodes",
        false,
        FIELD,
        &[],
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
        KEEP,
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        FIELD,
        &[],
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        FIELD,
        &["ev"],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        FIELD,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        FIELD,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        FIELD,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        FIELD,
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        KEEP,
        &["crd", "crds"],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        FIELD,
        &["pc"],
    ),
    // What CapacityBuffers refer to.
    ("", "v1", "PodTemplate", "podtemplates", true, FIELD, &[]),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        KEEP,
        &["sts"],
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        true,
        KEEP,
        &["rs"],
    ),
];

/// The built-in types, in the order [`PODS`] and its siblings index.
pub fn builtin() -> Vec<Arc<ResourceType>> {
    BUILTIN
        .iter()
        .map(
            |(group, version, kind, plural, namespaced, status, short)| {
                let (status, status_on_create) = match status {
                    Status::Field => (false, StatusOnCreate::Keep),
                    Status::Subresource(on_create) => (true, *on_create),
                };
                Arc::new(ResourceType {
                    group: (*group).to_owned(),
                    version: (*version).to_owned(),
                    kind: (*kind).to_owned(),
                    plural: (*plural).to_owned(),
                    short_names: short.iter().map(|s| (*s).to_owned()).collect(),
                    categories: Vec::new(),
                    namespaced: *namespaced,
                    status,
                    status_on_create,
                    scale: None,
                    admission: None,
                    served: true,
                })
            },
        )
        .collect()
}

/// The groups served, each with its versions, in the order discovery lists them.
pub fn groups(types: &[Arc<ResourceType>]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| t.served && !t.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) if versions.contains(&t.version) => {}
            Some((_, versions)) => versions.push(t.version.clone()),
            None => groups.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_positions_point_at_their_types() {
        let types = builtin();
        assert_eq!(types[PODS].plural, "pods");
        assert_eq!(types[NODES].plural, "nodes");
        assert_eq!(types[NAMESPACES].plural, "namespaces");
        assert_eq!(types[PODDISRUPTIONBUDGETS].plural, "poddisruptionbudgets");
        assert_eq!(
            types[CUSTOMRESOURCEDEFINITIONS].plural,
            "customresourcedefinitions"
        );
    }
}
