//! `karpenter install`: every manifest the controller needs in a cluster, built from typed
//! Kubernetes objects (so each is a valid k8s-openapi object) and settings read from a values
//! file with the same keys as the Helm chart in `deploy/charts/karpenter-rs`.
//!
//! Where the journal lives: an `emptyDir` per pod (bounded by `journal.sizeLimit`). The
//! NodeClaim, NodePool and EC2NodeClass objects in the API server are the source of truth;
//! the journal is each replica's flight recorder of what it decided while it led. A restart
//! on the same node keeps it (the `emptyDir` outlives container restarts); a pod rescheduled
//! elsewhere starts a fresh journal, and the new leader works from the API objects: NodeClaims
//! whose instances run are adopted, the others finalized (with the in-memory cloud, instances
//! die with the process that launched them). Post-mortems of a replica that is gone need its journal copied out first
//! (`kubectl cp`), or the pod's node kept.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, Namespace, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecurityContext, Service, ServiceAccount, ServicePort,
    ServiceSpec, Toleration, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

/// Settings of an installation: the Helm chart's `values.yaml`, key for key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Values {
    /// Namespace everything namespaced goes into.
    pub namespace: String,
    /// Print a Namespace object too (off for `kube-system`, which always exists).
    pub create_namespace: bool,
    /// Name of the Deployment, ServiceAccount, roles and Service.
    pub name: String,
    /// Controller image.
    pub image: Image,
    /// Replicas (one leads, the others keep caches warm).
    pub replicas: i32,
    /// The controller's ServiceAccount.
    pub service_account: ServiceAccountValues,
    /// Controller settings, passed as environment variables with upstream's names.
    pub settings: Settings,
    /// Container resources (requests and limits).
    pub resources: BTreeMap<String, BTreeMap<String, String>>,
    /// Extra node selector for the controller's pods.
    pub node_selector: BTreeMap<String, String>,
    /// Extra tolerations for the controller's pods.
    pub tolerations: Vec<Toleration>,
    /// Priority class of the controller's pods.
    pub priority_class_name: String,
    /// The journal volume.
    pub journal: Journal,
}

/// The controller image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Image {
    /// Repository.
    pub repository: String,
    /// Tag.
    pub tag: String,
    /// Digest (`sha256:…`); when given, the image is pulled by it and the tag only labels it.
    pub digest: String,
    /// Pull policy.
    pub pull_policy: String,
}

impl Image {
    /// `REPOSITORY:TAG`, or `REPOSITORY:TAG@DIGEST` when a digest pins it.
    pub fn reference(&self) -> String {
        match self.digest.as_str() {
            "" => format!("{}:{}", self.repository, self.tag),
            digest => format!("{}:{}@{digest}", self.repository, self.tag),
        }
    }
}

/// The controller's ServiceAccount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ServiceAccountValues {
    /// Annotations, e.g. `eks.amazonaws.com/role-arn` for IRSA.
    pub annotations: BTreeMap<String, String>,
}

/// The feature gates the controller reads (`FEATURE_GATES`), with upstream's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FeatureGates {
    /// `SpotToSpotConsolidation`: consolidation may replace spot nodes with cheaper spot
    /// nodes.
    pub spot_to_spot_consolidation: bool,
    /// `NodeOverlay`: NodeOverlays reprice instance types (`price`, `priceAdjustment`) and
    /// add extended resources (`capacity`).
    pub node_overlay: bool,
    /// `ReservedCapacity` (on): EC2NodeClasses' capacity reservations are resolved and
    /// launched into.
    pub reserved_capacity: bool,
    /// `NodeRepair`: nodes unhealthy past the cloud's repair policies are replaced.
    pub node_repair: bool,
    /// `StaticCapacity`: static NodePools (`spec.replicas`) keep their replicas.
    pub static_capacity: bool,
    /// `CapacityBuffer`: CapacityBuffers keep headroom launched ahead of demand.
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            spot_to_spot_consolidation: false,
            node_overlay: false,
            reserved_capacity: true,
            node_repair: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

/// Controller settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// Where nodes come from: `aws` (EC2, the default) or `sim` (simulated Nodes, for clusters
    /// without real nodes such as kind or the test API server; the controller refuses a
    /// cluster with EC2 Nodes).
    pub cloud: String,
    /// `AWS_REGION`: the region nodes launch in (`sim`: whose catalog and prices are used).
    pub region: String,
    /// `CLUSTER_NAME` (`aws`): tags every instance and names the node role's cluster.
    pub cluster_name: String,
    /// `CLUSTER_ENDPOINT` (`aws`): the API server address nodes join; empty: the EKS
    /// cluster's (`eks:DescribeCluster`).
    pub cluster_endpoint: String,
    /// `CLUSTER_CA_BUNDLE` (`aws`, base64 PEM): the CA nodes trust; empty: the service
    /// account's.
    #[serde(rename = "clusterCABundle")]
    pub cluster_ca_bundle: String,
    /// `INTERRUPTION_QUEUE` (`aws`): the SQS queue of EventBridge interruption events; empty:
    /// interruption handling is off.
    pub interruption_queue: String,
    /// `VM_MEMORY_OVERHEAD_PERCENT` (`aws`): the fraction of memory the hypervisor keeps.
    pub vm_memory_overhead_percent: f64,
    /// `BATCH_IDLE_DURATION`.
    pub batch_idle_duration: String,
    /// `BATCH_MAX_DURATION`.
    pub batch_max_duration: String,
    /// `PREFERENCE_POLICY`.
    pub preference_policy: String,
    /// `MIN_VALUES_POLICY`.
    pub min_values_policy: String,
    /// `FEATURE_GATES`.
    pub feature_gates: FeatureGates,
    /// `LOG_LEVEL`.
    pub log_level: String,
    /// `METRICS_PORT`.
    pub metrics_port: i32,
    /// `HEALTH_PROBE_PORT`.
    pub health_probe_port: i32,
    /// `METRICS_BIND_ADDRESS`: the address `/metrics` listens on (the controller's own
    /// default is loopback; in a pod, Prometheus scrapes the pod IP).
    pub metrics_bind_address: String,
    /// `HEALTH_PROBE_BIND_ADDRESS`: the address `/healthz` and `/readyz` listen on (the
    /// kubelet probes the pod IP).
    pub health_probe_bind_address: String,
}

/// The journal volume (an `emptyDir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Journal {
    /// Upper bound of the volume, e.g. `1Gi`.
    pub size_limit: String,
    /// `JOURNAL_SNAPSHOT_INTERVAL`: how often the journal's state is snapshotted.
    pub snapshot_interval: String,
    /// `JOURNAL_RETENTION`: history older than this is removed (`0s`: kept).
    pub retention: String,
    /// `JOURNAL_MAX_MIB`: the oldest history is removed while the events exceed this many
    /// MiB (0: no limit). The storage engine takes two to three times this on disk.
    #[serde(rename = "maxMiB")]
    pub max_mib: u64,
    /// `JOURNAL_BUCKET`: an S3 bucket (BUCKET or BUCKET/PREFIX) the history is also kept
    /// in; empty: none.
    pub bucket: String,
    /// `JOURNAL_SHIP_INTERVAL`: how often the leader ships the journal to the bucket (at
    /// least 1s).
    pub ship_interval: String,
}

impl Default for Values {
    fn default() -> Self {
        Values {
            namespace: "kube-system".into(),
            create_namespace: false,
            name: "karpenter-rs".into(),
            image: Image::default(),
            replicas: 2,
            service_account: ServiceAccountValues::default(),
            settings: Settings::default(),
            resources: BTreeMap::from([
                (
                    "requests".into(),
                    BTreeMap::from([("cpu".into(), "1".into()), ("memory".into(), "1Gi".into())]),
                ),
                (
                    "limits".into(),
                    BTreeMap::from([("memory".into(), "1Gi".into())]),
                ),
            ]),
            node_selector: BTreeMap::from([("kubernetes.io/os".into(), "linux".into())]),
            tolerations: vec![Toleration {
                key: Some("CriticalAddonsOnly".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }],
            priority_class_name: "system-cluster-critical".into(),
            journal: Journal::default(),
        }
    }
}

impl Default for Image {
    fn default() -> Self {
        Image {
            repository: String::new(),
            tag: env!("CARGO_PKG_VERSION").into(),
            digest: String::new(),
            pull_policy: "IfNotPresent".into(),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cloud: "aws".into(),
            region: "us-west-2".into(),
            cluster_name: String::new(),
            cluster_endpoint: String::new(),
            cluster_ca_bundle: String::new(),
            interruption_queue: String::new(),
            vm_memory_overhead_percent: 0.075,
            batch_idle_duration: "1s".into(),
            batch_max_duration: "10s".into(),
            preference_policy: "Respect".into(),
            min_values_policy: "Strict".into(),
            feature_gates: FeatureGates::default(),
            log_level: "info".into(),
            metrics_port: 8080,
            health_probe_port: 8081,
            metrics_bind_address: "0.0.0.0".into(),
            health_probe_bind_address: "0.0.0.0".into(),
        }
    }
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            size_limit: "1Gi".into(),
            snapshot_interval: "10m".into(),
            retention: "24h".into(),
            max_mib: 64,
            bucket: String::new(),
            ship_interval: "1m".into(),
        }
    }
}

/// Sets `KEY=VALUE` (a dotted key) in `tree`.
fn apply_set(tree: &mut serde_yaml_ng::Value, set: &str) -> anyhow::Result<()> {
    use serde_yaml_ng::Value;
    let (key, value) = set.split_once('=').with_context(|| {
        format!("--set {set:?}: give KEY=VALUE, e.g. settings.clusterName=prod")
    })?;
    let path = dotted_key(key);
    anyhow::ensure!(
        path.iter().all(|p| !p.is_empty()),
        "--set {set:?}: {key:?} is not a dotted key, e.g. settings.clusterName"
    );
    let value = match serde_yaml_ng::from_str::<Value>(value) {
        Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::String(_))) => v,
        _ => Value::String(value.to_owned()),
    };
    let mut node = tree;
    for (i, part) in path.iter().enumerate() {
        let Value::Mapping(map) = node else {
            anyhow::bail!("--set {set:?}: {} is not a mapping", path[..i].join("."));
        };
        let part = Value::String(part.clone());
        if i + 1 == path.len() {
            map.insert(part, value);
            return Ok(());
        }
        node = map
            .entry(part)
            .or_insert_with(|| Value::Mapping(Default::default()));
    }
    Ok(())
}

/// The parts of a dotted key, `\.` standing for a dot inside a part (as Helm reads
/// `serviceAccount.annotations.eks\.amazonaws\.com/role-arn`).
fn dotted_key(key: &str) -> Vec<String> {
    let (mut parts, mut part) = (Vec::new(), String::new());
    let mut chars = key.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                part.push('.');
                chars.next();
            }
            '.' => parts.push(std::mem::take(&mut part)),
            c => part.push(c),
        }
    }
    parts.push(part);
    parts
}

/// Where the journal is mounted in the container.
pub const JOURNAL_PATH: &str = "/var/lib/karpenter/journal";

impl Values {
    /// Reads a values file (YAML); unknown keys and wrong types are errors naming the key.
    pub fn from_yaml(text: &str, origin: &str) -> anyhow::Result<Values> {
        Values::from_yaml_with(text, origin, &[])
    }

    /// [`Values::from_yaml`], then each `KEY=VALUE` of `sets` (Helm's `--set`: a dotted key,
    /// the value read as a YAML scalar) over it.
    pub fn from_yaml_with(text: &str, origin: &str, sets: &[String]) -> anyhow::Result<Values> {
        let mut tree: serde_yaml_ng::Value = if text.trim().is_empty() {
            serde_yaml_ng::Value::Mapping(Default::default())
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?
        };
        for set in sets {
            apply_set(&mut tree, set)?;
        }
        let values: Values = serde_path_to_error::deserialize(tree).map_err(|e| {
            anyhow::anyhow!(
                "{origin}: {} at `{}`; see deploy/charts/karpenter-rs/values.yaml for every key",
                e.inner(),
                e.path()
            )
        })?;
        values.check().with_context(|| origin.to_owned())?;
        Ok(values)
    }

    fn check(&self) -> anyhow::Result<()> {
        let s = &self.settings;
        anyhow::ensure!(
            !self.image.repository.trim().is_empty(),
            "image.repository: required; build the image (deploy/README.md, \"The image\"), push it to a registry the cluster pulls from and give its repository, e.g. 111122223333.dkr.ecr.us-west-2.amazonaws.com/karpenter-rs"
        );
        anyhow::ensure!(
            self.image.digest.is_empty() || self.image.digest.starts_with("sha256:"),
            "image.digest: {:?} is not a digest; give the pushed image's sha256:… (or leave it empty to pull by tag)",
            self.image.digest
        );
        anyhow::ensure!(
            matches!(s.cloud.as_str(), "sim" | "aws"),
            "settings.cloud: {:?} is not a cloud; use \"sim\" (simulated Nodes) or \"aws\" (EC2)",
            s.cloud
        );
        if s.cloud == "aws" {
            anyhow::ensure!(
                !s.cluster_name.is_empty(),
                "settings.clusterName: required with settings.cloud \"aws\" (the EKS cluster's name)"
            );
        } else {
            anyhow::ensure!(
                s.interruption_queue.is_empty(),
                "settings.interruptionQueue: only with settings.cloud \"aws\""
            );
        }
        anyhow::ensure!(
            (0.0..1.0).contains(&s.vm_memory_overhead_percent),
            "settings.vmMemoryOverheadPercent: {} is not a fraction between 0 and 1, e.g. 0.075",
            s.vm_memory_overhead_percent
        );
        anyhow::ensure!(self.replicas >= 1, "replicas: must be at least 1");
        if !self.journal.bucket.trim().is_empty() {
            karpenter_aws::history::HistoryLocation::parse(&self.journal.bucket)
                .map_err(|e| anyhow::anyhow!("journal.bucket: {e}"))?;
        }
        for (key, value) in [
            (
                "settings.batchIdleDuration",
                &self.settings.batch_idle_duration,
            ),
            (
                "settings.batchMaxDuration",
                &self.settings.batch_max_duration,
            ),
            ("journal.snapshotInterval", &self.journal.snapshot_interval),
            ("journal.retention", &self.journal.retention),
            ("journal.shipInterval", &self.journal.ship_interval),
        ] {
            karpenter_core::vocab::duration::parse_duration(value).map_err(|e| {
                anyhow::anyhow!("{key}: {value:?} is not a duration like \"10s\" ({e})")
            })?;
        }
        let ship = karpenter_core::vocab::duration::parse_duration(&self.journal.ship_interval);
        anyhow::ensure!(
            ship.is_ok_and(|d| d >= std::time::Duration::from_secs(1)),
            "journal.shipInterval: {:?} is shorter than 1s; give e.g. \"1m\" (the default)",
            self.journal.ship_interval
        );
        anyhow::ensure!(
            matches!(
                self.settings.preference_policy.as_str(),
                "Respect" | "Ignore"
            ),
            "settings.preferencePolicy: must be Respect or Ignore"
        );
        anyhow::ensure!(
            matches!(
                self.settings.min_values_policy.as_str(),
                "Strict" | "BestEffort"
            ),
            "settings.minValuesPolicy: must be Strict or BestEffort"
        );
        for (key, value) in [
            (
                "settings.metricsBindAddress",
                &self.settings.metrics_bind_address,
            ),
            (
                "settings.healthProbeBindAddress",
                &self.settings.health_probe_bind_address,
            ),
        ] {
            anyhow::ensure!(
                value.parse::<std::net::IpAddr>().is_ok(),
                "{key}: {value:?} is not an IP address; use \"0.0.0.0\" (every address of the pod) or a specific one"
            );
        }
        Ok(())
    }
}

fn labels(values: &Values) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "karpenter-rs".into()),
        ("app.kubernetes.io/instance".into(), values.name.clone()),
    ])
}

fn meta(values: &Values, namespaced: bool) -> ObjectMeta {
    ObjectMeta {
        name: Some(values.name.clone()),
        namespace: namespaced.then(|| values.namespace.clone()),
        labels: Some(labels(values)),
        ..ObjectMeta::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| (*s).to_owned()).collect());
    PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        verbs: strings(verbs).unwrap_or_default(),
        ..PolicyRule::default()
    }
}

/// What the controller may do cluster-wide: read what it watches, write NodeClaims and
/// their status, sync and delete Nodes, evict pods, publish Events; with `simulated_nodes`
/// (the in-memory cloud) also create Nodes, report their status and renew their Leases in
/// `kube-node-lease`, report the status of the pods bound to them and finish the pods being
/// deleted, as a kubelet would.
pub fn cluster_rules(simulated_nodes: bool) -> Vec<PolicyRule> {
    const READ: &[&str] = &["get", "list", "watch"];
    let mut rules = vec![
        rule(
            &[""],
            &[
                "pods",
                "namespaces",
                "persistentvolumeclaims",
                "persistentvolumes",
                "podtemplates",
            ],
            READ,
        ),
        rule(
            &["apps"],
            &["daemonsets", "deployments", "statefulsets", "replicasets"],
            READ,
        ),
        // CapacityBuffers (read only with the CapacityBuffer gate on) and what they refer to.
        rule(&["autoscaling.x-k8s.io"], &["capacitybuffers"], READ),
        rule(
            &["autoscaling.x-k8s.io"],
            &["capacitybuffers/status"],
            &["patch", "update"],
        ),
        rule(&["policy"], &["poddisruptionbudgets"], READ),
        rule(
            &["storage.k8s.io"],
            &["storageclasses", "csinodes", "volumeattachments"],
            READ,
        ),
        rule(&["karpenter.k8s.aws"], &["ec2nodeclasses"], READ),
        rule(&["karpenter.sh"], &["nodepools", "nodeoverlays"], READ),
        rule(
            &["karpenter.sh"],
            &["nodeclaims"],
            &[
                "get", "list", "watch", "create", "patch", "update", "delete",
            ],
        ),
        rule(
            &["karpenter.sh", "karpenter.k8s.aws"],
            &[
                "nodeclaims/status",
                "nodepools/status",
                "nodeoverlays/status",
                "ec2nodeclasses/status",
            ],
            &["patch", "update"],
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
    ];
    if simulated_nodes {
        rules.push(rule(
            &[""],
            &["nodes"],
            &[
                "get", "list", "watch", "create", "patch", "update", "delete",
            ],
        ));
        rules.push(rule(&[""], &["nodes/status"], &["patch", "update"]));
        rules.push(rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "patch", "update"],
        ));
        // The simulated kubelets start the pods bound to their nodes and finish those being
        // deleted.
        rules.push(rule(&[""], &["pods"], &["delete"]));
        rules.push(rule(&[""], &["pods/status"], &["patch", "update"]));
    } else {
        rules.push(rule(
            &[""],
            &["nodes"],
            &["get", "list", "watch", "patch", "update", "delete"],
        ));
    }
    rules
}

/// What the controller may do in its own namespace: leader election.
pub fn namespace_rules() -> Vec<PolicyRule> {
    vec![rule(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "list", "watch", "create", "update", "patch"],
    )]
}

fn env(name: &str, value: impl ToString) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_string()),
        value_from: None,
    }
}

fn env_from_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn probe(path: &str, port: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(port),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

fn deployment(values: &Values) -> Deployment {
    let s = &values.settings;
    let selector = labels(values);
    let container = Container {
        name: "controller".into(),
        image: Some(values.image.reference()),
        image_pull_policy: Some(values.image.pull_policy.clone()),
        args: Some(vec![
            "controller".into(),
            "--cloud".into(),
            s.cloud.clone(),
            "--journal".into(),
            JOURNAL_PATH.into(),
        ]),
        env: Some(vec![
            env("AWS_REGION", &s.region),
            env("CLUSTER_NAME", &s.cluster_name),
            env("CLUSTER_ENDPOINT", &s.cluster_endpoint),
            env("CLUSTER_CA_BUNDLE", &s.cluster_ca_bundle),
            env("INTERRUPTION_QUEUE", &s.interruption_queue),
            env("VM_MEMORY_OVERHEAD_PERCENT", s.vm_memory_overhead_percent),
            env("BATCH_IDLE_DURATION", &s.batch_idle_duration),
            env("BATCH_MAX_DURATION", &s.batch_max_duration),
            env("PREFERENCE_POLICY", &s.preference_policy),
            env("MIN_VALUES_POLICY", &s.min_values_policy),
            env(
                "JOURNAL_SNAPSHOT_INTERVAL",
                &values.journal.snapshot_interval,
            ),
            env("JOURNAL_RETENTION", &values.journal.retention),
            env("JOURNAL_MAX_MIB", values.journal.max_mib),
            env("JOURNAL_BUCKET", &values.journal.bucket),
            env("JOURNAL_SHIP_INTERVAL", &values.journal.ship_interval),
            env(
                "FEATURE_GATES",
                format!(
                    "SpotToSpotConsolidation={},NodeOverlay={},ReservedCapacity={},NodeRepair={},StaticCapacity={},CapacityBuffer={}",
                    s.feature_gates.spot_to_spot_consolidation,
                    s.feature_gates.node_overlay,
                    s.feature_gates.reserved_capacity,
                    s.feature_gates.node_repair,
                    s.feature_gates.static_capacity,
                    s.feature_gates.capacity_buffer
                ),
            ),
            env("LOG_LEVEL", &s.log_level),
            env("LOG_FORMAT", "json"),
            env("METRICS_PORT", s.metrics_port),
            env("HEALTH_PROBE_PORT", s.health_probe_port),
            env("METRICS_BIND_ADDRESS", &s.metrics_bind_address),
            env("HEALTH_PROBE_BIND_ADDRESS", &s.health_probe_bind_address),
            env("DISABLE_LEADER_ELECTION", values.replicas == 1),
            env_from_field("LEADER_ELECTION_NAMESPACE", "metadata.namespace"),
            env_from_field("SYSTEM_NAMESPACE", "metadata.namespace"),
            env_from_field("POD_NAME", "metadata.name"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("http-metrics".into()),
                container_port: s.metrics_port,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("http".into()),
                container_port: s.health_probe_port,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(30),
            ..probe("/healthz", s.health_probe_port, 10)
        }),
        readiness_probe: Some(probe("/readyz", s.health_probe_port, 10)),
        resources: Some(ResourceRequirements {
            requests: values.resources.get("requests").map(quantities),
            limits: values.resources.get("limits").map(quantities),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "journal".into(),
            mount_path: JOURNAL_PATH.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let spread = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_owned(),
        when_unsatisfiable: when.to_owned(),
        label_selector: Some(LabelSelector {
            match_labels: Some(selector.clone()),
            match_expressions: None,
        }),
        ..TopologySpreadConstraint::default()
    };
    Deployment {
        metadata: meta(values, true),
        spec: Some(DeploymentSpec {
            replicas: Some(values.replicas),
            revision_history_limit: Some(10),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(k8s_openapi::api::apps::v1::RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(1)),
                    max_surge: Some(IntOrString::Int(0)),
                }),
            }),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(values.name.clone()),
                    priority_class_name: Some(values.priority_class_name.clone())
                        .filter(|p| !p.is_empty()),
                    security_context: Some(PodSecurityContext {
                        fs_group: Some(65532),
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![container],
                    node_selector: Some(values.node_selector.clone()),
                    tolerations: Some(values.tolerations.clone()),
                    // Never on a node it manages: it would drain itself.
                    affinity: Some(Affinity {
                        node_affinity: Some(NodeAffinity {
                            required_during_scheduling_ignored_during_execution: Some(
                                NodeSelector {
                                    node_selector_terms: vec![NodeSelectorTerm {
                                        match_expressions: Some(vec![NodeSelectorRequirement {
                                            key: karpenter_core::vocab::labels::NODEPOOL.into(),
                                            operator: "DoesNotExist".into(),
                                            values: None,
                                        }]),
                                        match_fields: None,
                                    }],
                                },
                            ),
                            ..NodeAffinity::default()
                        }),
                        ..Affinity::default()
                    }),
                    topology_spread_constraints: Some(vec![
                        spread("topology.kubernetes.io/zone", "ScheduleAnyway"),
                        spread("kubernetes.io/hostname", "DoNotSchedule"),
                    ]),
                    volumes: Some(vec![Volume {
                        name: "journal".into(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            size_limit: Some(Quantity(values.journal.size_limit.clone())),
                            medium: None,
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

fn quantities(map: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    map.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

fn to_value(
    object: &impl Serialize,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = serde_json::json!(api_version);
    value["kind"] = serde_json::json!(kind);
    Ok(value)
}

/// Every object to apply, CRDs first, in the order `kubectl apply` should create them.
pub fn manifests(values: &Values) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    for crd in karpenter_core::api::crds::all().context("cannot build the CRDs")? {
        out.push(serde_json::to_value(&crd)?);
    }
    if values.create_namespace {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(values.namespace.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        out.push(to_value(&ns, "v1", "Namespace")?);
    }
    let account = ServiceAccount {
        metadata: ObjectMeta {
            annotations: Some(values.service_account.annotations.clone()).filter(|a| !a.is_empty()),
            ..meta(values, true)
        },
        ..ServiceAccount::default()
    };
    out.push(to_value(&account, "v1", "ServiceAccount")?);
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: values.name.clone(),
        namespace: Some(values.namespace.clone()),
        api_group: None,
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.to_owned(),
        name: values.name.clone(),
    };
    let cluster_role = ClusterRole {
        metadata: meta(values, false),
        rules: Some(cluster_rules(values.settings.cloud == "sim")),
        aggregation_rule: None,
    };
    out.push(to_value(
        &cluster_role,
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
    )?);
    let cluster_binding = ClusterRoleBinding {
        metadata: meta(values, false),
        role_ref: role_ref("ClusterRole"),
        subjects: Some(vec![subject.clone()]),
    };
    out.push(to_value(
        &cluster_binding,
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
    )?);
    let role = Role {
        metadata: meta(values, true),
        rules: Some(namespace_rules()),
    };
    out.push(to_value(&role, "rbac.authorization.k8s.io/v1", "Role")?);
    let binding = RoleBinding {
        metadata: meta(values, true),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject]),
    };
    out.push(to_value(
        &binding,
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
    )?);
    let service = Service {
        metadata: meta(values, true),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(labels(values)),
            ports: Some(vec![ServicePort {
                name: Some("http-metrics".into()),
                port: values.settings.metrics_port,
                target_port: Some(IntOrString::String("http-metrics".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    out.push(to_value(&service, "v1", "Service")?);
    let pdb = PodDisruptionBudget {
        metadata: meta(values, true),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(labels(values)),
                match_expressions: None,
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    };
    out.push(to_value(&pdb, "policy/v1", "PodDisruptionBudget")?);
    out.push(to_value(&deployment(values), "apps/v1", "Deployment")?);
    Ok(out)
}

/// The manifests as one multi-document YAML stream.
pub fn to_yaml(objects: &[serde_json::Value]) -> anyhow::Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(object)?);
    }
    Ok(out)
}

/// The Helm chart's generated files, by path inside the chart: its CRDs and the RBAC rules
/// its templates include, so the chart grants exactly what [`manifests`] grants.
pub fn chart_files() -> anyhow::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    for crd in karpenter_core::api::crds::all().context("cannot build the CRDs")? {
        files.push((
            format!("crds/{}", karpenter_core::api::crds::file_name(&crd)),
            karpenter_core::api::crds::to_yaml(std::slice::from_ref(&crd))?,
        ));
    }
    let header = "# Generated by `karpenter install --write-chart-files deploy/charts/karpenter-rs`; do not edit.\n";
    for (name, rules) in [
        ("rbac/cluster-rules-sim.yaml", cluster_rules(true)),
        ("rbac/cluster-rules.yaml", cluster_rules(false)),
        ("rbac/namespace-rules.yaml", namespace_rules()),
    ] {
        files.push((
            name.to_owned(),
            format!("{header}{}", serde_yaml_ng::to_string(&rules)?),
        ));
    }
    Ok(files)
}

#[cfg(test)]
mod tests;
