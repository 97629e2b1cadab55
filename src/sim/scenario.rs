//! Scenario files: NodePools and EC2NodeClasses (ordinary manifests, validated like
//! `karpenter validate`), DaemonSets, Deployments, PDBs, capacity shortages and a timeline.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use karpenter_core::api::manifest::{KarpenterObject, ManifestChecker};
use karpenter_core::api::{CapacityBuffer, EC2NodeClass, NodeOverlay, NodePool};
use karpenter_core::model::{CapacityType, Pod, Requirement, ResourceName, Resources, Toleration};
use karpenter_core::ports::InterruptionKind;
use karpenter_core::vocab::duration::parse_duration;
use karpenter_core::vocab::labels::normalize_label;
use serde::Deserialize;

/// The scenario `karpenter simulate` runs when given none.
pub const BUILT_IN: &str = include_str!("builtin.yaml");

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScenarioFile {
    /// Name shown in the report.
    pub name: String,
    /// Simulated time to run.
    #[serde(deserialize_with = "duration")]
    pub duration: Duration,
    /// Region whose catalog and zones are used.
    #[serde(default = "default_region")]
    pub region: String,
    /// Time from launch until the node joins.
    #[serde(default = "default_boot", deserialize_with = "duration")]
    pub boot_delay: Duration,
    /// Time from joining until Ready.
    #[serde(default = "default_ready", deserialize_with = "duration")]
    pub ready_delay: Duration,
    /// NodePool and EC2NodeClass manifests (multi-document YAML).
    pub manifests: String,
    /// DaemonSets.
    #[serde(default)]
    pub daemonsets: Vec<Workload>,
    /// Deployments present at the start.
    #[serde(default)]
    pub deployments: Vec<Workload>,
    /// PodTemplates (namespace `default`) CapacityBuffers' `podTemplateRef` may name; their
    /// `replicas` are not used.
    #[serde(default)]
    pub pod_templates: Vec<Workload>,
    /// Capacity shortages to inject.
    #[serde(default)]
    pub shortages: Vec<Shortage>,
    /// Capacity reservations the cloud holds for the cluster (used while the
    /// `ReservedCapacity` gate is on, as it is by default).
    #[serde(default)]
    pub reservations: Vec<ReservationSpec>,
    /// What happens when.
    #[serde(default)]
    pub timeline: Vec<Step>,
    /// PriorityClasses by name, with their values (besides the two system classes).
    #[serde(default)]
    pub priority_classes: BTreeMap<String, i32>,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_boot() -> Duration {
    Duration::from_secs(40)
}
fn default_ready() -> Duration {
    Duration::from_secs(20)
}

/// A pod template with a name: a DaemonSet, Deployment or job.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Name.
    pub name: String,
    /// CPU request, e.g. `500m`.
    pub cpu: String,
    /// Memory request, e.g. `1Gi`.
    pub memory: String,
    /// `nvidia.com/gpu` request.
    #[serde(default)]
    pub gpus: i64,
    /// Further requests by Kubernetes resource name, e.g. an extended resource a NodeOverlay
    /// adds (`smarter-devices/fuse: "1"`, `hugepages-2Mi: 100Mi`).
    #[serde(default)]
    pub resources: BTreeMap<String, String>,
    /// Replicas (Deployments) or pods (jobs).
    #[serde(default)]
    pub replicas: usize,
    /// Pod labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Node selector.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Toleration keys (operator Exists, any effect); `"*"` tolerates everything.
    #[serde(default)]
    pub tolerations: Vec<String>,
    /// Topology spread constraints over the workload's own labels.
    #[serde(default)]
    pub topology_spread: Vec<SpreadSpec>,
    /// Host ports (TCP, every address) each pod binds: no two such pods share a node.
    #[serde(default)]
    pub host_ports: Vec<i32>,
    /// A PodDisruptionBudget for the Deployment's pods.
    #[serde(default)]
    pub max_unavailable: Option<usize>,
    /// `karpenter.sh/do-not-disrupt` on its pods: `"true"`, or a duration such as `"30m"`
    /// (protected while younger than it).
    #[serde(default)]
    pub do_not_disrupt: Option<String>,
    /// Jobs: how long each pod runs once started.
    #[serde(default, deserialize_with = "optional_duration")]
    pub run_for: Option<Duration>,
    /// Its pods' PriorityClass: one of the scenario's `priorityClasses`, or
    /// `system-cluster-critical` / `system-node-critical`.
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// Its pods' priority (resolved from `priorityClassName` when that is given, as the API
    /// server's priority admission does; a value that disagrees is refused).
    #[serde(default)]
    pub priority: Option<i32>,
    /// `controller.kubernetes.io/pod-deletion-cost` on its pods.
    #[serde(default)]
    pub deletion_cost: i32,
}

fn optional_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// A topology spread constraint of a workload (its selector is the workload's labels).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpreadSpec {
    /// The node label whose values are the domains, e.g. `topology.kubernetes.io/zone`.
    pub topology_key: String,
    /// Largest allowed skew.
    #[serde(default = "one")]
    pub max_skew: i64,
    /// While fewer domains than this exist, the emptiest counts as holding none.
    #[serde(default)]
    pub min_domains: Option<i64>,
    /// `DoNotSchedule` (default) or `ScheduleAnyway`.
    #[serde(default = "do_not_schedule")]
    pub when_unsatisfiable: String,
}

fn one() -> i64 {
    1
}
fn do_not_schedule() -> String {
    "DoNotSchedule".into()
}

/// An injected capacity shortage.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Shortage {
    /// Instance type (all when absent).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// Zone (all when absent).
    #[serde(default)]
    pub zone: Option<String>,
    /// `spot` or `on-demand` (both when absent).
    #[serde(default)]
    pub capacity_type: Option<String>,
    /// Start.
    #[serde(deserialize_with = "duration")]
    pub from: Duration,
    /// End.
    #[serde(deserialize_with = "duration")]
    pub until: Duration,
}

/// A capacity reservation of a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReservationSpec {
    /// Its id (`cr-…`); numbered in order when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Instances it holds.
    pub count: u32,
    /// `default` (an On-Demand Capacity Reservation, the default) or `capacity-block`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// When a Capacity Block ends, since the start (required for, and only for, one).
    #[serde(default, deserialize_with = "optional_duration")]
    pub ends_after: Option<Duration>,
}

impl ReservationSpec {
    /// Its id, the `index`th of its scenario: as written, or numbered.
    pub fn id(&self, index: usize) -> String {
        (self.id.clone()).unwrap_or_else(|| format!("cr-{:017x}", index + 1))
    }

    /// As the simulated cloud takes it, the `index`th of its scenario; `types` is the
    /// catalog it must name a type and zone of.
    pub fn to_cloud(
        &self,
        index: usize,
        types: &[std::sync::Arc<karpenter_core::model::InstanceType>],
    ) -> anyhow::Result<crate::simcloud::SimReservation> {
        use karpenter_core::model::{Reservation, ReservationKind, reservation};
        if let Some(id) = &self.id {
            reservation::check_reservation_id(id).map_err(|e| anyhow!("id: {e}"))?;
        }
        let id = self.id(index);
        let kind = match self.kind.as_deref() {
            None => ReservationKind::Default,
            Some(text) => ReservationKind::parse(text)
                .ok_or_else(|| anyhow!("type: {text:?} is not default or capacity-block"))?,
        };
        let it = types
            .iter()
            .find(|t| t.name == self.instance_type)
            .ok_or_else(|| {
                anyhow!(
                    "instanceType: {:?} is not in this region's catalog",
                    self.instance_type
                )
            })?;
        if !it.offerings.iter().any(|o| o.zone == self.zone) {
            let zones: std::collections::BTreeSet<&str> =
                it.offerings.iter().map(|o| o.zone.as_str()).collect();
            bail!(
                "zone: {} is not offered in {:?}; its zones are {}",
                self.instance_type,
                self.zone,
                zones.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        if self.count == 0 {
            bail!("count: a reservation holds at least one instance");
        }
        match (kind, self.ends_after) {
            (ReservationKind::CapacityBlock, None) => {
                bail!("endsAfter: a capacity-block ends; say when, e.g. endsAfter: 2h")
            }
            (ReservationKind::Default, Some(_)) => {
                bail!(
                    "endsAfter: only a capacity-block ends; remove it or set type: capacity-block"
                )
            }
            _ => {}
        }
        Ok(crate::simcloud::SimReservation {
            reservation: Reservation { id, kind },
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            count: self.count,
            ends_after: self.ends_after,
        })
    }
}

/// One timeline step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    /// When, since the start.
    #[serde(deserialize_with = "duration")]
    pub at: Duration,
    /// What.
    #[serde(flatten)]
    pub action: Action,
}

/// What a timeline step does.
#[derive(Debug, Clone, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Action {
    /// Scale a Deployment.
    Scale {
        /// Deployment name.
        deployment: String,
        /// New replica count.
        replicas: usize,
    },
    /// Start a job (its `replicas` pods each run for `runFor`).
    Job(Box<Workload>),
    /// Scale a static NodePool (`kubectl scale nodepool/<name> --replicas=<n>`).
    ScaleNodePool {
        /// NodePool name; it must be static (`spec.replicas` set).
        nodepool: String,
        /// New `spec.replicas`.
        replicas: i64,
    },
    /// Apply NodePool and EC2NodeClass manifests (new objects or edits; an edited template or
    /// node class drifts the nodes made from the old one).
    Apply(Box<Apply>),
    /// A new image is released for a node class (every node class when none is named): new
    /// nodes boot it, and nodes on the old one drift (`AMIDrift`).
    AmiRelease {
        /// The EC2NodeClass, or all of them.
        #[serde(default)]
        node_class: Option<String>,
    },
    /// Delete NodeClaims by hand (`kubectl delete nodeclaim`), the oldest of a NodePool first:
    /// drained within PDBs, then terminated.
    DeleteNodeClaim {
        /// NodePool.
        nodepool: String,
        /// How many.
        #[serde(default = "one_usize")]
        count: usize,
    },
    /// Make running nodes of a NodePool unhealthy (oldest first): their condition `type`
    /// holds at `status` from now on (`Ready: Unknown` is a kubelet that stopped reporting).
    NodeCondition {
        /// NodePool whose nodes turn unhealthy.
        nodepool: String,
        /// How many.
        #[serde(default = "one_usize")]
        count: usize,
        /// Condition type (`Ready`, `AcceleratedHardwareReady`, `KernelReady`, …).
        #[serde(rename = "type")]
        type_: String,
        /// `False` or `Unknown`.
        status: String,
    },
    /// Deliver interruption notices to running instances of a NodePool.
    Interrupt {
        /// NodePool whose instances are hit (oldest first).
        nodepool: String,
        /// How many.
        count: usize,
        /// `spot_interrupted` (default), `scheduled_change`, `instance_stopped`, `instance_terminated`.
        #[serde(default = "spot")]
        kind: InterruptionKind,
    },
}

fn one_usize() -> usize {
    1
}

/// Manifests applied mid-run: the text as written, and the objects read from it (at parse
/// time, so a mistake is reported before the run starts).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Apply {
    /// NodePool and EC2NodeClass manifests (multi-document YAML).
    pub manifests: String,
    /// Its NodePools.
    #[serde(skip)]
    pub nodepools: Vec<NodePool>,
    /// Its EC2NodeClasses.
    #[serde(skip)]
    pub nodeclasses: Vec<EC2NodeClass>,
}

fn spot() -> InterruptionKind {
    InterruptionKind::SpotInterrupted
}

/// A scenario ready to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file as read.
    pub file: ScenarioFile,
    /// Its NodePools.
    pub nodepools: Vec<NodePool>,
    /// Its EC2NodeClasses.
    pub nodeclasses: Vec<EC2NodeClass>,
    /// Its NodeOverlays (applied when the `NodeOverlay` gate is on).
    pub overlays: Vec<NodeOverlay>,
    /// Its CapacityBuffers (kept when the `CapacityBuffer` gate is on).
    pub buffers: Vec<CapacityBuffer>,
    /// The text it was read from, kept with its journal ([`super::whatif::SCENARIO_FILE`]).
    pub source: String,
}

impl Workload {
    /// The pod template.
    pub fn pod(&self) -> anyhow::Result<Pod> {
        let (requests, _) = Resources::from_quantities([
            ("cpu", self.cpu.as_str()),
            ("memory", self.memory.as_str()),
        ])
        .with_context(|| format!("workload {}: cpu/memory", self.name))?;
        let mut pod = Pod::simple(
            &self.name,
            requests.get(ResourceName::Cpu),
            requests.get(ResourceName::Memory),
        );
        pod.requests.set(ResourceName::NvidiaGpu, self.gpus);
        let (more, unknown) = Resources::from_quantities(
            (self.resources.iter()).map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .with_context(|| format!("workload {}: resources", self.name))?;
        if let Some(name) = unknown.first() {
            anyhow::bail!(
                "workload {}: resources: {name:?} is not a resource a pod can request here: name cpu, memory or an extended resource (domain/name, e.g. smarter-devices/fuse, or hugepages-<size>)",
                self.name
            );
        }
        for r in ResourceName::ALL.into_iter().filter(|r| more.get(*r) != 0) {
            pod.requests.set(r, more.get(r));
        }
        pod.labels = self.labels.clone();
        pod.priority = self.priority.unwrap_or(0);
        pod.deletion_cost = self.deletion_cost;
        // A workload's replicas are siblings, as a ReplicaSet's pods are.
        pod.owner = Some(format!("ReplicaSet/{}", self.name));
        if let Some(value) = &self.do_not_disrupt {
            // The simulated cluster turns it back into the pod's annotation.
            pod.labels.insert(
                karpenter_core::vocab::labels::DO_NOT_DISRUPT.into(),
                value.clone(),
            );
        }
        for (key, value) in &self.node_selector {
            pod.node_selector
                .add(normalize_label(key), Requirement::is_in([value.clone()]));
        }
        pod.blocked = pod.restricted_selection();
        for (i, s) in self.topology_spread.iter().enumerate() {
            let schedule_anyway = match s.when_unsatisfiable.as_str() {
                "DoNotSchedule" => false,
                "ScheduleAnyway" => true,
                other => anyhow::bail!(
                    "workload {}: topologySpread[{i}].whenUnsatisfiable: {other:?} is not DoNotSchedule or ScheduleAnyway",
                    self.name
                ),
            };
            let key = normalize_label(&s.topology_key).to_owned();
            if key.is_empty() {
                anyhow::bail!(
                    "workload {}: topologySpread[{i}].topologyKey is empty; name a node label such as topology.kubernetes.io/zone",
                    self.name
                );
            }
            if s.max_skew < 1 {
                anyhow::bail!(
                    "workload {}: topologySpread[{i}].maxSkew must be at least 1",
                    self.name
                );
            }
            if s.min_domains.is_some_and(|m| m < 1) {
                anyhow::bail!(
                    "workload {}: topologySpread[{i}].minDomains must be at least 1",
                    self.name
                );
            }
            pod.spread.push(karpenter_core::model::pod::TopologySpread {
                topology_key: key,
                max_skew: s.max_skew,
                selector: self.labels.clone(),
                schedule_anyway,
                min_domains: s.min_domains,
                ..Default::default()
            });
        }
        for (i, port) in self.host_ports.iter().enumerate() {
            if !(1..=65535).contains(port) {
                anyhow::bail!(
                    "workload {}: hostPorts[{i}]: {port} is not a port number (1-65535)",
                    self.name
                );
            }
            pod.host_ports.push(karpenter_core::model::pod::HostPort {
                ip: "0.0.0.0".into(),
                protocol: "TCP".into(),
                port: *port,
            });
        }
        pod.tolerations = self
            .tolerations
            .iter()
            .map(|key| Toleration {
                key: if key == "*" {
                    String::new()
                } else {
                    key.clone()
                },
                exists: true,
                value: String::new(),
                effect: String::new(),
            })
            .collect();
        Ok(pod)
    }
}

impl Shortage {
    /// As the simulated cloud takes it.
    pub fn to_cloud(&self) -> anyhow::Result<crate::simcloud::CapacityShortage> {
        let capacity_type = match self.capacity_type.as_deref() {
            None => None,
            Some(text) => Some(CapacityType::parse(text).ok_or_else(|| {
                anyhow!("shortages[].capacityType: {text:?} is not spot, on-demand or reserved")
            })?),
        };
        Ok(crate::simcloud::CapacityShortage {
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type,
            from: self.from,
            until: self.until,
        })
    }
}

/// Gives each workload naming a PriorityClass that class's value, as the API server's
/// priority admission gives its pods; an unknown class, or a priority that disagrees with
/// the class, is a problem naming the workload and the field.
fn resolve_priorities(file: &mut ScenarioFile, problems: &mut Vec<String>) {
    const SYSTEM: [(&str, i32); 2] = [
        ("system-node-critical", 2_000_001_000),
        ("system-cluster-critical", 2_000_000_000),
    ];
    for (name, value) in &file.priority_classes {
        if name.starts_with("system-") {
            problems.push(format!(
                "priorityClasses.{name}: names starting with system- are reserved for the system classes"
            ));
        } else if *value > 1_000_000_000 {
            problems.push(format!(
                "priorityClasses.{name}: {value} is above 1000000000, the most a user-defined class may have"
            ));
        }
    }
    let classes = &file.priority_classes;
    let jobs = file
        .timeline
        .iter_mut()
        .filter_map(|s| match &mut s.action {
            Action::Job(job) => Some(job.as_mut()),
            _ => None,
        });
    for w in file
        .daemonsets
        .iter_mut()
        .chain(file.deployments.iter_mut())
        .chain(jobs)
    {
        let Some(class) = &w.priority_class_name else {
            continue;
        };
        let value = SYSTEM
            .iter()
            .find(|(name, _)| name == class)
            .map(|(_, v)| *v)
            .or_else(|| classes.get(class).copied());
        match (value, w.priority) {
            (None, _) => problems.push(format!(
                "workload {}: priorityClassName: no PriorityClass named {class:?}; define it under priorityClasses or use system-cluster-critical or system-node-critical",
                w.name
            )),
            (Some(v), Some(given)) if given != v => problems.push(format!(
                "workload {}: priority: {given} disagrees with PriorityClass {class} ({v}); remove priority or the class",
                w.name
            )),
            (Some(v), _) => w.priority = Some(v),
        }
    }
}

/// The objects of a scenario's manifest text.
#[derive(Default)]
struct Manifests {
    nodepools: Vec<NodePool>,
    nodeclasses: Vec<EC2NodeClass>,
    overlays: Vec<NodeOverlay>,
    buffers: Vec<CapacityBuffer>,
}

/// The NodePools, EC2NodeClasses and NodeOverlays of a manifest text, checked as
/// `karpenter validate` checks them; problems are added to `problems` with `place`.
fn read_manifests(
    checker: &ManifestChecker,
    text: &str,
    place: &str,
    problems: &mut Vec<String>,
) -> Manifests {
    let mut out = Manifests::default();
    for report in checker.check_str(text) {
        for problem in &report.problems {
            problems.push(format!(
                "{place}: document {} ({}): {problem}",
                report.index,
                report.label()
            ));
        }
        match report.object {
            Some(KarpenterObject::NodePool(p)) => out.nodepools.push(*p),
            Some(KarpenterObject::EC2NodeClass(c)) => out.nodeclasses.push(*c),
            Some(KarpenterObject::CapacityBuffer(b)) => out.buffers.push(*b),
            Some(KarpenterObject::NodeClaim(_)) => problems.push(format!(
                "{place}: document {}: NodeClaims are created by the autoscaler, not by scenarios",
                report.index
            )),
            Some(KarpenterObject::NodeOverlay(o)) => {
                let untracked = o.untracked_capacity();
                if untracked.is_empty() {
                    out.overlays.push(*o);
                } else {
                    problems.push(format!(
                        "{place}: document {}: spec.capacity: {} cannot be tracked: an extended resource is a domain-prefixed name (smarter-devices/fuse) or hugepages-<size>, and at most {} distinct ones are tracked",
                        report.index,
                        untracked.join(", "),
                        karpenter_core::model::resources::EXTENDED_SLOTS
                    ));
                }
            }
            None => {}
        }
    }
    out
}

/// Reads and checks a scenario: YAML shape (unknown fields are errors), manifests (as
/// `karpenter validate` does), references between them, and workload quantities.
pub fn parse(text: &str, origin: &str) -> anyhow::Result<Scenario> {
    let file: ScenarioFile =
        serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
            .map_err(|e| anyhow!("{origin}: {}: {}", e.path(), e.inner()))?;
    let checker = ManifestChecker::new()?;
    let mut problems = Vec::new();
    let Manifests {
        nodepools,
        nodeclasses,
        overlays,
        buffers,
    } = read_manifests(&checker, &file.manifests, "manifests", &mut problems);
    let mut file = file;
    resolve_priorities(&mut file, &mut problems);
    for (i, step) in file.timeline.iter_mut().enumerate() {
        if let Action::Apply(apply) = &mut step.action {
            let place = format!("timeline[{i}].apply.manifests");
            let read = read_manifests(&checker, &apply.manifests, &place, &mut problems);
            if !read.overlays.is_empty() || !read.buffers.is_empty() {
                problems.push(format!(
                    "{place}: NodeOverlays and CapacityBuffers are read from the scenario's top-level manifests only; move them there"
                ));
            }
            if read.nodepools.is_empty() && read.nodeclasses.is_empty() {
                problems.push(format!("{place}: no NodePool or EC2NodeClass to apply"));
            }
            apply.nodepools = read.nodepools;
            apply.nodeclasses = read.nodeclasses;
        }
    }
    if nodepools.is_empty() && problems.is_empty() {
        problems.push("manifests: no NodePool; add at least one karpenter.sh/v1 NodePool".into());
    }
    let applied_classes: Vec<&EC2NodeClass> = file
        .timeline
        .iter()
        .filter_map(|s| match &s.action {
            Action::Apply(a) => Some(a.nodeclasses.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    let applied_pools: Vec<&NodePool> = file
        .timeline
        .iter()
        .filter_map(|s| match &s.action {
            Action::Apply(a) => Some(a.nodepools.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    for pool in nodepools.iter().chain(applied_pools.iter().copied()) {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        for field in karpenter_core::api::unsupported::nodepool(pool) {
            if field.blocks {
                problems.push(format!("manifests: NodePool/{name}: {}", field.describe()));
            } else {
                tracing::warn!(nodepool = name, field = field.field, "{}", field.message);
            }
        }
        let class = &pool.spec.template.spec.node_class_ref.name;
        if !nodeclasses
            .iter()
            .chain(applied_classes.iter().copied())
            .any(|c| c.metadata.name.as_deref() == Some(class))
        {
            problems.push(format!(
                "manifests: NodePool/{} references EC2NodeClass/{class}, which the scenario does not define",
                pool.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    let deployments: Vec<&str> = file.deployments.iter().map(|d| d.name.as_str()).collect();
    let pools: Vec<&str> = nodepools
        .iter()
        .chain(applied_pools.iter().copied())
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let classes: Vec<&str> = nodeclasses
        .iter()
        .chain(applied_classes.iter().copied())
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    for (i, step) in file.timeline.iter().enumerate() {
        match &step.action {
            Action::Scale { deployment, .. } if !deployments.contains(&deployment.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].scale.deployment: no deployment named {deployment:?}"
                ));
            }
            Action::ScaleNodePool { nodepool, replicas } => {
                let pool = nodepools
                    .iter()
                    .chain(applied_pools.iter().copied())
                    .find(|p| p.metadata.name.as_deref() == Some(nodepool.as_str()));
                match pool {
                    None => problems.push(format!(
                        "timeline[{i}].scaleNodePool.nodepool: no NodePool named {nodepool:?}"
                    )),
                    Some(p) if !p.is_static() => problems.push(format!(
                        "timeline[{i}].scaleNodePool.nodepool: NodePool {nodepool} is not static; only a NodePool with spec.replicas can be scaled (a NodePool cannot change between static and dynamic)"
                    )),
                    Some(_) if *replicas < 0 => problems.push(format!(
                        "timeline[{i}].scaleNodePool.replicas: {replicas} is negative; give 0 or more"
                    )),
                    Some(_) => {}
                }
            }
            Action::NodeCondition {
                nodepool, status, ..
            } => {
                if !pools.contains(&nodepool.as_str()) {
                    problems.push(format!(
                        "timeline[{i}].nodeCondition.nodepool: no NodePool named {nodepool:?}"
                    ));
                }
                if !matches!(status.as_str(), "True" | "False" | "Unknown") {
                    problems.push(format!(
                        "timeline[{i}].nodeCondition.status: {status:?} is not True, False or Unknown"
                    ));
                }
            }
            Action::Interrupt { nodepool, .. } if !pools.contains(&nodepool.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].interrupt.nodepool: no NodePool named {nodepool:?}"
                ));
            }
            Action::Interrupt {
                kind: karpenter_core::ports::InterruptionKind::CapacityBlockExpiring,
                ..
            } => problems.push(format!(
                "timeline[{i}].interrupt.kind: capacity_block_expiring comes from a reservation's end (reservations[].endsAfter with type: capacity-block), not from the timeline"
            )),
            Action::DeleteNodeClaim { nodepool, .. } if !pools.contains(&nodepool.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].deleteNodeClaim.nodepool: no NodePool named {nodepool:?}"
                ));
            }
            Action::AmiRelease {
                node_class: Some(class),
            } if !classes.contains(&class.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].amiRelease.nodeClass: no EC2NodeClass named {class:?}"
                ));
            }
            Action::Job(job) if job.run_for.is_none() => {
                problems.push(format!(
                    "timeline[{i}].job.runFor: jobs need a run time, e.g. runFor: 10m"
                ));
            }
            _ => {}
        }
        if step.at > file.duration {
            problems.push(format!(
                "timeline[{i}].at: {:?} is after the end of the scenario ({:?})",
                step.at, file.duration
            ));
        }
    }
    let jobs = file.timeline.iter().filter_map(|s| match &s.action {
        Action::Job(job) => Some(job.as_ref()),
        _ => None,
    });
    let templates: Vec<&str> = file.pod_templates.iter().map(|t| t.name.as_str()).collect();
    super::buffers::check(&templates, &deployments, &buffers, &mut problems);
    for w in (file.daemonsets.iter())
        .chain(&file.deployments)
        .chain(&file.pod_templates)
        .chain(jobs)
    {
        if let Err(e) = w.pod() {
            problems.push(format!("{e:#}"));
        }
        if let Some(value) = &w.do_not_disrupt
            && let Err(e) = karpenter_core::model::drain::do_not_disrupt(value, None, 0)
        {
            problems.push(format!("workload {}: doNotDisrupt: {e}", w.name));
        }
    }
    for (i, s) in file.shortages.iter().enumerate() {
        if let Err(e) = s.to_cloud() {
            problems.push(format!("shortages[{i}]: {e:#}"));
        }
    }
    if !file.reservations.is_empty() {
        match crate::system::catalog_instance_types(&file.region) {
            Ok(types) => {
                let mut ids = std::collections::BTreeSet::new();
                for (i, r) in file.reservations.iter().enumerate() {
                    match r.to_cloud(i, &types) {
                        Ok(r) if !ids.insert(r.reservation.id.clone()) => problems.push(format!(
                            "reservations[{i}].id: {} is listed twice",
                            r.reservation.id
                        )),
                        Ok(_) => {}
                        Err(e) => problems.push(format!("reservations[{i}].{e:#}")),
                    }
                }
            }
            Err(e) => problems.push(format!("reservations: {e:#}")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "{origin} has {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(Scenario {
        file,
        nodepools,
        nodeclasses,
        overlays,
        buffers,
        source: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_scenario_is_valid() {
        let scenario = parse(BUILT_IN, "built-in").unwrap();
        assert_eq!(scenario.nodepools.len(), 4);
        // It exercises every kind of step.
        let kinds: std::collections::BTreeSet<&str> = scenario
            .file
            .timeline
            .iter()
            .map(|s| match &s.action {
                Action::Scale { .. } => "scale",
                Action::ScaleNodePool { .. } => "scaleNodePool",
                Action::Job(_) => "job",
                Action::Apply(_) => "apply",
                Action::AmiRelease { .. } => "amiRelease",
                Action::DeleteNodeClaim { .. } => "deleteNodeClaim",
                Action::Interrupt { .. } => "interrupt",
                Action::NodeCondition { .. } => "nodeCondition",
            })
            .collect();
        assert_eq!(kinds.len(), 6, "{kinds:?}");
        let applied = scenario.file.timeline.iter().find_map(|s| match &s.action {
            Action::Apply(a) => Some(a),
            _ => None,
        });
        assert_eq!(applied.map(|a| a.nodepools.len()), Some(1));
    }

    #[test]
    fn steps_naming_what_does_not_exist_are_refused() {
        let text = BUILT_IN.replace(
            "deleteNodeClaim: {nodepool: general-purpose",
            "deleteNodeClaim: {nodepool: general",
        );
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(
            err.contains("deleteNodeClaim.nodepool: no NodePool named \"general\""),
            "{err}"
        );
        let text = BUILT_IN.replace("amiRelease: {}", "amiRelease: {nodeClass: gpu}");
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(
            err.contains("amiRelease.nodeClass: no EC2NodeClass named \"gpu\""),
            "{err}"
        );
        let text = BUILT_IN.replace("labels: {team: web}", "labels: {karpenter.sh/nodepool: x}");
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("apply.manifests: document"), "{err}");
        let text = BUILT_IN.replace("doNotDisrupt: \"true\"", "doNotDisrupt: \"always\"");
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(err.contains("workload db: doNotDisrupt"), "{err}");
    }

    #[test]
    fn priority_classes_resolve_as_the_api_server_resolves_them() {
        let classes = |extra: &str| {
            let text = BUILT_IN.replace(
                "labels: {app: web}",
                &format!("labels: {{app: web}}\n    {extra}"),
            );
            parse(
                &format!("{text}\npriorityClasses: {{gold: 1000}}\n"),
                "p.yaml",
            )
        };
        let web = |s: &Scenario| {
            let w = s.file.deployments.iter().find(|d| d.name == "web").unwrap();
            w.pod().unwrap()
        };
        let gold = classes("priorityClassName: gold\n    deletionCost: -5").unwrap();
        assert_eq!((web(&gold).priority, web(&gold).deletion_cost), (1000, -5));
        let critical = classes("priorityClassName: system-cluster-critical").unwrap();
        assert_eq!(web(&critical).priority, 2_000_000_000);
        assert_eq!(web(&classes("priority: 7").unwrap()).priority, 7);
        let err = classes("priorityClassName: silver")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("workload web: priorityClassName: no PriorityClass named \"silver\""),
            "{err}"
        );
        let err = classes("priorityClassName: gold\n    priority: 3")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("workload web: priority: 3 disagrees with PriorityClass gold (1000)"),
            "{err}"
        );
    }

    #[test]
    fn mistakes_are_named_with_their_place() {
        let err = parse(
            "name: x\nduration: 1h\nmanifests: ''\nrepliacs: 3\n",
            "bad.yaml",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("bad.yaml: repliacs: unknown field `repliacs`"),
            "{err}"
        );
        let text = BUILT_IN.replace("{deployment: web,", "{deployment: wbe,");
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(
            err.contains("timeline[") && err.contains("no deployment named \"wbe\""),
            "{err}"
        );
        let err = parse("name: x\nduration: 1d\nmanifests: ''\n", "bad.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("duration: invalid duration \"1d\""), "{err}");
        let text = BUILT_IN.replace(
            "labels: {app: web}",
            "labels: {app: web}\n    hostPorts: [70000]",
        );
        let err = parse(&text, "bad.yaml").unwrap_err().to_string();
        assert!(
            err.contains("workload web: hostPorts[0]: 70000 is not a port number (1-65535)"),
            "{err}"
        );
    }

    #[test]
    fn a_static_nodepool_is_accepted_and_one_limiting_cpu_is_refused_naming_the_rule() {
        let static_pool = BUILT_IN.replace(
            "    name: general-purpose\n  spec:\n    template:",
            "    name: general-purpose\n  spec:\n    replicas: 2\n    template:",
        );
        assert_ne!(static_pool, BUILT_IN);
        // As upstream's CRD has it, a static pool may limit only its node count.
        let err = parse(&static_pool, "static.yaml").unwrap_err().to_string();
        assert!(
            err.contains("only 'limits.nodes' is supported on static NodePools"),
            "{err}"
        );
        let text = static_pool.replacen(
            "    limits:\n      cpu: \"1000\"\n",
            "    limits:\n      nodes: \"4\"\n",
            1,
        );
        assert_ne!(text, static_pool);
        let scenario = parse(&text, "static.yaml").unwrap();
        assert!(
            scenario
                .nodepools
                .iter()
                .any(|p| p.spec.replicas == Some(2))
        );
        // Scaling it in the timeline: only a static pool, only to 0 or more.
        let step = |pool: &str, replicas: i64| {
            text.replace(
                "timeline:\n",
                &format!(
                    "timeline:\n  - at: 1m\n    scaleNodePool: {{nodepool: {pool}, replicas: {replicas}}}\n"
                ),
            )
        };
        assert!(parse(&step("general-purpose", 5), "static.yaml").is_ok());
        let err = parse(&step("general-purpose", -1), "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("timeline[0].scaleNodePool.replicas: -1 is negative"),
            "{err}"
        );
        let dynamic = BUILT_IN.replace(
            "timeline:\n",
            "timeline:\n  - at: 1m\n    scaleNodePool: {nodepool: general-purpose, replicas: 3}\n",
        );
        let err = parse(&dynamic, "s.yaml").unwrap_err().to_string();
        assert!(
            err.contains(
                "timeline[0].scaleNodePool.nodepool: NodePool general-purpose is not static"
            ),
            "{err}"
        );
    }
}
