//! Well-known labels, annotations, taints and the label-domain restrictions of Karpenter v1.

/// The NodePool that owns a node or NodeClaim.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// `spot`, `on-demand` or `reserved`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set to `"true"` once the node registered.
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Set to `"true"` once the node initialized.
pub const INITIALIZED: &str = "karpenter.sh/initialized";
/// `"true"` on a pod, node or NodeClaim blocks voluntary disruption.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Pod annotation: what deleting the pod costs its ReplicaSet (an int32); disruption weighs
/// it when choosing which nodes to disrupt.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Hash of the NodePool template, on the NodePool and on each NodeClaim.
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Version of the hash algorithm behind [`NODEPOOL_HASH`].
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Annotation on a NodeClaim launched with fewer distinct values than minValues asked for.
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
/// The label the API server puts on every namespace, holding its name.
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// The finalizer on nodes and NodeClaims.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Taint key put on nodes being disrupted.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// Taint key nodes register with until Karpenter has synced them.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
/// The taint Kubernetes puts on a cordoned node (`spec.unschedulable`).
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// `"true"` on a NodeClaim keeps registration from copying its taints onto the Node (the
/// kubelet registers with them itself).
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
/// The EC2NodeClass of a node.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The static hash of the EC2NodeClass a NodeClaim was created with (`NodeClassDrift`).
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// The version of that hash: hashes of another version are re-stamped, not compared.
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

/// Zone of a node.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Region of a node.
pub const REGION: &str = "topology.kubernetes.io/region";
/// Instance type of a node.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// CPU architecture.
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system.
pub const OS: &str = "kubernetes.io/os";
/// Windows build.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// Hostname (never allowed in NodePool labels or requirements).
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// AWS zone id.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";

/// Deprecated aliases and the label each one means.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    // The EBS CSI driver's zone key (in PV node affinity and StorageClass topologies), as
    // upstream's AWS provider normalises it.
    ("topology.ebs.csi.aws.com/zone", ZONE),
];

/// The capacity reservation a reserved node runs in.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// Its kind: `default` (an On-Demand Capacity Reservation) or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";

/// The `karpenter.k8s.aws/*` labels users may name in NodePool labels and requirements (every
/// other label of that domain is restricted), in the order upstream's CRD lists them.
pub const AWS_WELL_KNOWN_LABELS: &[&str] = &[
    "karpenter.k8s.aws/instance-tenancy",
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_ID,
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    EC2NODECLASS,
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];

/// The `karpenter.sh/*` labels users may name in NodePool labels and requirements.
pub const KARPENTER_WELL_KNOWN_LABELS: &[&str] = &[CAPACITY_TYPE, NODEPOOL];

/// Labels users may put in requirements and node labels that Kubernetes or the cloud define.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    WINDOWS_BUILD,
    CAPACITY_TYPE,
    ZONE_ID,
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
];

/// Domains whose labels Karpenter owns, each with the labels users may still name. A key is in
/// a domain when the part before its first `/` (the whole key without one) ends with it, as
/// upstream's CEL rules test it.
pub const RESTRICTED_LABEL_DOMAINS: &[(&str, &[&str])] = &[
    ("karpenter.sh", KARPENTER_WELL_KNOWN_LABELS),
    ("karpenter.k8s.aws", AWS_WELL_KNOWN_LABELS),
];

/// The taint Kubernetes' node lifecycle controller gives a node whose `Ready` is `False`.
pub const NODE_NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The taint it gives a node whose `Ready` is `Unknown` (its kubelet stopped reporting).
pub const NODE_UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Taints Karpenter ignores when simulating scheduling, because they go away on their own.
pub const EPHEMERAL_TAINT_KEYS: &[&str] = &[
    NODE_NOT_READY_TAINT,
    NODE_UNREACHABLE_TAINT,
    "node.cloudprovider.kubernetes.io/uninitialized",
    UNREGISTERED_TAINT,
];

/// Where a label key is being used, which changes what is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelUse {
    /// NodePool `spec.template.metadata.labels` and `spec.template.spec.requirements`.
    NodePool,
    /// NodeClaim `spec.requirements` (the provisioner writes `karpenter.sh/nodepool` there).
    NodeClaim,
}

/// The domain (prefix) of a label key, if it has one.
pub fn label_domain(key: &str) -> Option<&str> {
    key.split_once('/').map(|(domain, _)| domain)
}

/// Why a label key may not be used in a NodePool or NodeClaim, or `None` if it may: the
/// hostname label, `karpenter.sh/nodepool` in a NodePool, and the restricted domains' other
/// labels, each with upstream's message.
pub fn label_restriction(key: &str, usage: LabelUse) -> Option<String> {
    if key == HOSTNAME || (key == NODEPOOL && usage == LabelUse::NodePool) {
        return Some(format!("label {key:?} is restricted"));
    }
    // Upstream's `self.find("^([^/]+)")`: the text before the first `/`, empty when there is
    // none before it.
    let first_segment = key.split('/').next().unwrap_or_default();
    RESTRICTED_LABEL_DOMAINS
        .iter()
        .find(|(domain, allowed)| !allowed.contains(&key) && first_segment.ends_with(domain))
        .map(|(domain, _)| format!("label domain {domain:?} is restricted"))
}

/// The canonical form of a deprecated label alias.
pub fn normalize_label(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, canonical)| canonical)
}

/// Checks a Kubernetes qualified name (`[prefix/]name`), as used for label and taint keys.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && let Some(problem) = dns_subdomain_problem(prefix)
    {
        return Some(format!("prefix part {problem}"));
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !is_label_value_shape(name) {
        return Some(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
        );
    }
    None
}

fn dns_subdomain_problem(value: &str) -> Option<String> {
    if value.is_empty() || value.len() > 253 {
        return Some("must be a DNS subdomain of 1..253 characters".into());
    }
    let ok = value.split('.').all(|part| {
        !part.is_empty()
            && part.len() <= 63
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    });
    (!ok).then(|| "must be a lowercase RFC 1123 subdomain (e.g. 'example.com')".to_owned())
}

fn is_label_value_shape(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Checks a label value (empty, or up to 63 characters of the label alphabet).
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    (!is_label_value_shape(value)).then(|| {
        "a valid label value must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_domains_as_upstream_restricts_them() {
        let cases = [
            ("team", None),
            ("example.com/team", None),
            (ZONE, None),
            (CAPACITY_TYPE, None),
            ("karpenter.k8s.aws/instance-family", None),
            ("karpenter.k8s.aws/placement-group-id", None),
            ("node.kubernetes.io/pool", None),
            // Upstream lifted the kubernetes.io and k8s.io restrictions (v1.9).
            ("kubernetes.io/team", None),
            ("foo.k8s.io/team", None),
            (
                HOSTNAME,
                Some("label \"kubernetes.io/hostname\" is restricted"),
            ),
            (
                NODEPOOL,
                Some("label \"karpenter.sh/nodepool\" is restricted"),
            ),
            (
                "karpenter.sh/custom",
                Some("label domain \"karpenter.sh\" is restricted"),
            ),
            // Upstream tests a suffix, not a subdomain, and keys without a prefix too.
            (
                "mykarpenter.sh/custom",
                Some("label domain \"karpenter.sh\" is restricted"),
            ),
            (
                "karpenter.sh",
                Some("label domain \"karpenter.sh\" is restricted"),
            ),
            (
                "karpenter.k8s.aws/custom",
                Some("label domain \"karpenter.k8s.aws\" is restricted"),
            ),
        ];
        for (key, expected) in cases {
            assert_eq!(
                label_restriction(key, LabelUse::NodePool).as_deref(),
                expected,
                "{key}"
            );
        }
        assert_eq!(label_restriction(NODEPOOL, LabelUse::NodeClaim), None);
    }

    #[test]
    fn qualified_names() {
        assert_eq!(qualified_name_problem("example.com/a-b_c.d"), None);
        assert!(qualified_name_problem("Example.com/x").is_some());
        assert!(qualified_name_problem("a/").is_some());
        assert!(qualified_name_problem("-a").is_some());
        assert!(qualified_name_problem(&"a".repeat(64)).is_some());
        assert_eq!(label_value_problem(""), None);
        assert!(label_value_problem("a b").is_some());
    }
}
