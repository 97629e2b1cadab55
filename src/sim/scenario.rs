//! Scenario files: NodePools and EC2NodeClasses (ordinary manifests, validated like
//! `karpenter validate`), DaemonSets, Deployments, PDBs, capacity shortages and a timeline.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use karpenter_core::api::manifest::{KarpenterObject, ManifestChecker};
use karpenter_core::api::{EC2NodeClass, NodePool};
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
    /// Capacity shortages to inject.
    #[serde(default)]
    pub shortages: Vec<Shortage>,
    /// What happens when.
    #[serde(default)]
    pub timeline: Vec<Step>,
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
    /// Jobs: how long each pod runs once started.
    #[serde(default, deserialize_with = "optional_duration")]
    pub run_for: Option<Duration>,
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
#[serde(rename_all = "camelCase")]
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
        pod.labels = self.labels.clone();
        for (key, value) in &self.node_selector {
            pod.node_selector
                .add(normalize_label(key), Requirement::is_in([value.clone()]));
        }
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
    pub fn to_cloud(&self) -> anyhow::Result<super::cloud::CapacityShortage> {
        let capacity_type = match self.capacity_type.as_deref() {
            None => None,
            Some(text) => Some(CapacityType::parse(text).ok_or_else(|| {
                anyhow!("shortages[].capacityType: {text:?} is not spot, on-demand or reserved")
            })?),
        };
        Ok(super::cloud::CapacityShortage {
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type,
            from: self.from,
            until: self.until,
        })
    }
}

/// Reads and checks a scenario: YAML shape (unknown fields are errors), manifests (as
/// `karpenter validate` does), references between them, and workload quantities.
pub fn parse(text: &str, origin: &str) -> anyhow::Result<Scenario> {
    let file: ScenarioFile =
        serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
            .map_err(|e| anyhow!("{origin}: {}: {}", e.path(), e.inner()))?;
    let checker = ManifestChecker::new()?;
    let mut nodepools = Vec::new();
    let mut nodeclasses = Vec::new();
    let mut problems = Vec::new();
    for report in checker.check_str(&file.manifests) {
        for problem in &report.problems {
            problems.push(format!(
                "manifests: document {} ({}): {problem}",
                report.index,
                report.label()
            ));
        }
        match report.object {
            Some(KarpenterObject::NodePool(p)) => nodepools.push(*p),
            Some(KarpenterObject::EC2NodeClass(c)) => nodeclasses.push(*c),
            Some(KarpenterObject::NodeClaim(_)) => problems.push(format!("manifests: document {}: NodeClaims are created by the autoscaler, not by scenarios", report.index)),
            None => {}
        }
    }
    if nodepools.is_empty() && problems.is_empty() {
        problems.push("manifests: no NodePool; add at least one karpenter.sh/v1 NodePool".into());
    }
    for pool in &nodepools {
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
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    for (i, step) in file.timeline.iter().enumerate() {
        match &step.action {
            Action::Scale { deployment, .. } if !deployments.contains(&deployment.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].scale.deployment: no deployment named {deployment:?}"
                ));
            }
            Action::Interrupt { nodepool, .. } if !pools.contains(&nodepool.as_str()) => {
                problems.push(format!(
                    "timeline[{i}].interrupt.nodepool: no NodePool named {nodepool:?}"
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
    for w in file.daemonsets.iter().chain(&file.deployments) {
        if let Err(e) = w.pod() {
            problems.push(format!("{e:#}"));
        }
    }
    for (i, s) in file.shortages.iter().enumerate() {
        if let Err(e) = s.to_cloud() {
            problems.push(format!("shortages[{i}]: {e:#}"));
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_scenario_is_valid() {
        let scenario = parse(BUILT_IN, "built-in").unwrap();
        assert_eq!(scenario.nodepools.len(), 3);
        assert!(scenario.file.timeline.len() >= 4);
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
    fn a_static_nodepool_is_refused_naming_the_field() {
        // Valid as upstream's CRD has it: a static pool may limit only its node count.
        let text = BUILT_IN.replace(
            "    name: general-purpose\n  spec:\n    template:",
            "    name: general-purpose\n  spec:\n    replicas: 2\n    template:",
        );
        let text = text.replacen(
            "    limits:\n      cpu: \"1000\"\n",
            "    limits:\n      nodes: \"4\"\n",
            1,
        );
        assert_ne!(text, BUILT_IN);
        let err = parse(&text, "static.yaml").unwrap_err().to_string();
        assert!(
            err.contains(
                "NodePool/general-purpose: spec.replicas: static NodePools are not supported yet"
            ),
            "{err}"
        );
    }
}
