//! Node groups: read from a file (`--node-groups`), or derived from NodePools as a team
//! running Cluster Autoscaler would have set them up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::NodePool;
use crate::model::taints::untolerated;
use crate::model::{
    CapacityType, InstanceType, Pod, Requirement, Requirements, ResourceName, Resources, Taint,
};
use crate::scheduling::{Limits, NodePoolTemplate};
use crate::vocab::labels;

/// A group's size when nothing bounds it (Auto Scaling groups need a maximum).
const UNBOUNDED_MAX_SIZE: usize = 1000;

/// An Auto Scaling group as Cluster Autoscaler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroup {
    /// Name.
    pub name: String,
    /// The one instance type its nodes have.
    pub instance_type: Arc<InstanceType>,
    /// How they are bought.
    pub capacity_type: CapacityType,
    /// Zones it launches in.
    pub zones: Vec<String>,
    /// Fewest nodes.
    pub min_size: usize,
    /// Most nodes.
    pub max_size: usize,
    /// Labels its nodes register with (besides their instance type's).
    pub labels: BTreeMap<String, String>,
    /// Taints its nodes register with.
    pub taints: Vec<Taint>,
}

impl NodeGroup {
    /// The group as one scheduling round sees it, `size` nodes in it: only its type, in its
    /// zones and capacity type, up to its maximum.
    pub fn template(&self, size: usize) -> NodePoolTemplate {
        let mut requirements = Requirements::from_labels(&self.labels);
        requirements.add(
            labels::INSTANCE_TYPE,
            Requirement::is_in([self.instance_type.name.clone()]),
        );
        requirements.add(
            labels::CAPACITY_TYPE,
            Requirement::is_in([self.capacity_type.as_str()]),
        );
        requirements.add(labels::ZONE, Requirement::is_in(self.zones.clone()));
        NodePoolTemplate {
            name: self.name.clone(),
            weight: 0,
            requirements,
            taints: self.taints.clone(),
            startup_taints: Vec::new(),
            instance_types: vec![self.instance_type.clone()],
            limits: Limits {
                resources: BTreeMap::new(),
                nodes: Some(i64::try_from(self.max_size).unwrap_or(i64::MAX)),
            },
            usage: Resources::ZERO,
            node_count: i64::try_from(size).unwrap_or(i64::MAX),
        }
    }

    /// The NodePool its nodes stand in for (their `karpenter.sh/nodepool` label), if any.
    pub fn nodepool(&self) -> Option<&str> {
        self.labels.get(labels::NODEPOOL).map(String::as_str)
    }

    /// One line: name, type, capacity type, zones, sizes, $/h per node.
    pub fn describe(&self) -> String {
        let price = self
            .instance_type
            .offerings
            .iter()
            .filter(|o| o.capacity_type == self.capacity_type && self.zones.contains(&o.zone))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .unwrap_or(0.0);
        format!(
            "{}: {} {} in {}, {}–{} nodes, from ${price:.4}/h a node",
            self.name,
            self.instance_type.name,
            self.capacity_type,
            self.zones.join(","),
            self.min_size,
            self.max_size
        )
    }

    /// The file form ([`parse_groups`] reads it back).
    fn to_file(&self) -> GroupFile {
        GroupFile {
            name: self.name.clone(),
            instance_type: self.instance_type.name.clone(),
            capacity_type: Some(self.capacity_type.as_str().to_owned()),
            zones: Some(self.zones.clone()),
            min_size: self.min_size,
            max_size: Some(self.max_size),
            labels: self.labels.clone(),
            taints: self
                .taints
                .iter()
                .map(|t| TaintFile {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect(),
        }
    }
}

/// Node groups as a file, which [`parse_groups`] reads.
pub fn groups_yaml(groups: &[NodeGroup]) -> String {
    let file = GroupsFile {
        node_groups: groups.iter().map(NodeGroup::to_file).collect(),
    };
    serde_yaml_ng::to_string(&file).unwrap_or_default()
}

/// What is wrong with a node-groups file, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum GroupsError {
    /// Not YAML of the expected shape.
    #[error("{path}: {message}")]
    Shape {
        /// Where.
        path: String,
        /// What.
        message: String,
    },
    /// A value the cloud or Cluster Autoscaler would refuse.
    #[error("nodeGroups[{index}].{field}: {message}")]
    Invalid {
        /// The group's position.
        index: usize,
        /// The field.
        field: &'static str,
        /// What is wrong, and the fix.
        message: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupsFile {
    node_groups: Vec<GroupFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupFile {
    name: String,
    instance_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capacity_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zones: Option<Vec<String>>,
    #[serde(default)]
    min_size: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_size: Option<usize>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    taints: Vec<TaintFile>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaintFile {
    key: String,
    #[serde(default)]
    value: String,
    effect: String,
}

/// Reads a node-groups file against the region's instance types:
///
/// ```yaml
/// nodeGroups:
///   - name: general
///     instanceType: m6i.xlarge
///     capacityType: on-demand   # or spot; on-demand when left out
///     zones: [us-east-1a, us-east-1b]   # every zone the type is offered in when left out
///     minSize: 0
///     maxSize: 50
///     labels: {team: web}
///     taints: [{key: dedicated, value: web, effect: NoSchedule}]
/// ```
pub fn parse_groups(
    text: &str,
    catalog: &[Arc<InstanceType>],
) -> Result<Vec<NodeGroup>, GroupsError> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    let file: GroupsFile =
        serde_path_to_error::deserialize(deserializer).map_err(|e| GroupsError::Shape {
            path: match e.path().to_string().as_str() {
                "." => "node groups file".to_owned(),
                path => path.to_owned(),
            },
            message: e.inner().to_string(),
        })?;
    if file.node_groups.is_empty() {
        return Err(GroupsError::Shape {
            path: "nodeGroups".into(),
            message: "no node group; list at least one".into(),
        });
    }
    let mut names = BTreeSet::new();
    file.node_groups
        .into_iter()
        .enumerate()
        .map(|(index, g)| {
            let invalid = |field, message: String| GroupsError::Invalid {
                index,
                field,
                message,
            };
            if g.name.is_empty() || !names.insert(g.name.clone()) {
                return Err(invalid(
                    "name",
                    format!("{:?} is empty or used twice; give each group its own name", g.name),
                ));
            }
            let it = catalog
                .iter()
                .find(|t| t.name == g.instance_type)
                .ok_or_else(|| {
                    invalid(
                        "instanceType",
                        format!(
                            "{:?} is not in the region's catalog; use a type EC2 offers there (e.g. m6i.xlarge)",
                            g.instance_type
                        ),
                    )
                })?;
            let capacity_type = match g.capacity_type.as_deref() {
                None => CapacityType::OnDemand,
                Some(s) => match CapacityType::parse(s) {
                    Some(c @ (CapacityType::Spot | CapacityType::OnDemand)) => c,
                    _ => {
                        return Err(invalid(
                            "capacityType",
                            format!("{s:?}: use spot or on-demand"),
                        ));
                    }
                },
            };
            let offered: BTreeSet<&str> = it
                .offerings
                .iter()
                .filter(|o| o.capacity_type == capacity_type)
                .map(|o| o.zone.as_str())
                .collect();
            let zones = match g.zones {
                None => offered.iter().map(|z| (*z).to_owned()).collect(),
                Some(zones) => {
                    if let Some(z) = zones.iter().find(|z| !offered.contains(z.as_str())) {
                        return Err(invalid(
                            "zones",
                            format!(
                                "{} is not offered {capacity_type} in {z}; it is in {}",
                                it.name,
                                offered.iter().copied().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                    zones
                }
            };
            if zones.is_empty() {
                return Err(invalid(
                    "capacityType",
                    format!("{} is not offered {capacity_type} in any zone", it.name),
                ));
            }
            let max_size = g.max_size.unwrap_or(UNBOUNDED_MAX_SIZE);
            if g.min_size > max_size {
                return Err(invalid(
                    "minSize",
                    format!("{} is above maxSize {max_size}", g.min_size),
                ));
            }
            let mut taints = Vec::new();
            for t in g.taints {
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
                    return Err(invalid(
                        "taints",
                        format!(
                            "effect {:?}: use NoSchedule, PreferNoSchedule or NoExecute",
                            t.effect
                        ),
                    ));
                }
                taints.push(Taint::new(&t.key, &t.value, &t.effect));
            }
            Ok(NodeGroup {
                name: g.name,
                instance_type: it.clone(),
                capacity_type,
                zones,
                min_size: g.min_size,
                max_size,
                labels: g.labels,
                taints,
            })
        })
        .collect()
}

/// A node group derived from a NodePool, and why it has the type it has.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedGroup {
    /// The group.
    pub group: NodeGroup,
    /// How its type and size were chosen.
    pub why: String,
}

/// What a NodePool's nodes carry and allow.
struct PoolFacts {
    name: String,
    requirements: Requirements,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    limits: BTreeMap<String, String>,
}

impl PoolFacts {
    fn of(pool: &NodePool) -> Self {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let spec = &pool.spec.template.spec;
        let (requirements, mut labels) = pool.node_requirements();
        labels.insert(labels::NODEPOOL.into(), name.clone());
        PoolFacts {
            name,
            requirements,
            labels,
            taints: spec.taints.iter().map(Taint::from).collect(),
            limits: pool
                .spec
                .limits
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect(),
        }
    }

    /// Whether the pool's nodes could take `pod` (its taints tolerated, its node selector and
    /// required node affinity met by the pool's requirements).
    fn takes(&self, pod: &Pod) -> bool {
        untolerated(&self.taints, &pod.tolerations).is_none()
            && pod
                .requirement_alternatives()
                .iter()
                .any(|alt| alt.compatible_with_template(&self.requirements).is_ok())
    }

    /// The most nodes of `it` the pool's limits allow.
    fn max_size(&self, it: &InstanceType) -> Option<usize> {
        let mut max: Option<usize> = None;
        for (name, value) in &self.limits {
            let bound = if name == "nodes" {
                crate::model::quantity::Quantity::parse(value)
                    .ok()
                    .map(|q| q.units_ceil())
            } else {
                let (Some(resource), Ok((limit, _))) = (
                    ResourceName::register(name),
                    Resources::from_quantities([(name.as_str(), value.as_str())]),
                ) else {
                    continue;
                };
                let per_node = it.capacity.get(resource);
                (per_node > 0).then(|| limit.get(resource) / per_node)
            };
            if let Some(bound) = bound {
                let bound = usize::try_from(bound.max(0)).unwrap_or(usize::MAX);
                max = Some(max.map_or(bound, |m| m.min(bound)));
            }
        }
        max
    }
}

/// One node group per NodePool and capacity type it allows (spot first), as a team running
/// Cluster Autoscaler would have had them: the pool's labels (its name as
/// `karpenter.sh/nodepool`, so pods selecting the pool select the group) and taints, every
/// zone it allows, minimum 0, maximum from its limits (else 1000); its one instance type the
/// cheapest per vCPU that the pool allows and that takes the largest request of any workload
/// pod the pool could run, DaemonSets included, preferring 4 to 16 vCPUs and no GPU unless
/// those pods need one. A pool no type fits gets no group, and a note says so.
pub fn derive_groups(
    pools: &[NodePool],
    catalog: &[Arc<InstanceType>],
    workload: &[Pod],
    daemonsets: &[Pod],
) -> (Vec<DerivedGroup>, Vec<String>) {
    let mut groups = Vec::new();
    let mut notes = Vec::new();
    for pool in pools {
        let facts = PoolFacts::of(pool);
        // Pods the pool could run: tolerated, selected, and fitting one of its types.
        let pods: Vec<&Pod> = workload
            .iter()
            .filter(|p| {
                facts.takes(p)
                    && catalog.iter().any(|it| {
                        facts.requirements.compatible(&it.requirements).is_ok()
                            && p.requests.fits_in(&it.allocatable())
                    })
            })
            .collect();
        let largest = pods
            .iter()
            .fold(Resources::ZERO, |acc, p| acc.max(&p.requests));
        let overhead = daemonsets
            .iter()
            .filter(|ds| untolerated(&facts.taints, &ds.tolerations).is_none())
            .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests));
        let needs = largest.add(&overhead);
        let allowed = facts
            .requirements
            .get(labels::CAPACITY_TYPE)
            .cloned()
            .unwrap_or_else(|| Requirement::is_in([CapacityType::OnDemand.as_str()]));
        for capacity_type in [CapacityType::Spot, CapacityType::OnDemand] {
            if !allowed.has(capacity_type.as_str()) {
                continue;
            }
            match choose_type(&facts, catalog, capacity_type, &needs) {
                Some((it, price, zones)) => {
                    let max_size = facts.max_size(&it).unwrap_or(UNBOUNDED_MAX_SIZE);
                    let why = format!(
                        "NodePool {}: the cheapest {capacity_type} type per vCPU (${:.4}/vCPU-h) taking its largest pod ({}) and DaemonSets; max {max_size} {}",
                        facts.name,
                        price / (it.capacity.get(ResourceName::Cpu) as f64 / 1000.0),
                        describe_requests(&largest),
                        if max_size == UNBOUNDED_MAX_SIZE {
                            "(no limit on the pool)"
                        } else {
                            "from the pool's limits"
                        }
                    );
                    groups.push(DerivedGroup {
                        group: NodeGroup {
                            name: format!("{}-{}", facts.name, capacity_type),
                            instance_type: it,
                            capacity_type,
                            zones,
                            min_size: 0,
                            max_size,
                            labels: facts.labels.clone(),
                            taints: facts.taints.clone(),
                        },
                        why,
                    });
                }
                None => notes.push(format!(
                    "NodePool {}: no {capacity_type} instance type it allows takes its largest pod ({}) with its DaemonSets; no node group for it",
                    facts.name,
                    describe_requests(&largest)
                )),
            }
        }
    }
    (groups, notes)
}

/// CPU, memory and GPUs of a request, for notes.
fn describe_requests(r: &Resources) -> String {
    let mut out = format!(
        "{}m CPU, {} MiB",
        r.get(ResourceName::Cpu),
        r.get(ResourceName::Memory) / (1 << 20)
    );
    let gpus = r.get(ResourceName::NvidiaGpu);
    if gpus > 0 {
        out.push_str(&format!(", {gpus} GPU"));
    }
    out
}

/// An instance type a derived group could have.
struct Choice<'a> {
    /// Outside 4-16 vCPUs, or a GPU type for pods that need none.
    unusual: bool,
    per_vcpu: f64,
    it: &'a Arc<InstanceType>,
    price: f64,
    zones: Vec<String>,
}

/// The type [`derive_groups`] gives a pool's group of `capacity_type`, its cheapest price,
/// and the zones the pool allows it in.
fn choose_type(
    facts: &PoolFacts,
    catalog: &[Arc<InstanceType>],
    capacity_type: CapacityType,
    needs: &Resources,
) -> Option<(Arc<InstanceType>, f64, Vec<String>)> {
    let mut requirements = facts.requirements.clone();
    requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::is_in([capacity_type.as_str()]),
    );
    let wants_gpu = needs.get(ResourceName::NvidiaGpu) > 0;
    let cpu = |it: &InstanceType| it.capacity.get(ResourceName::Cpu);
    catalog
        .iter()
        .filter(|it| {
            requirements.compatible(&it.requirements).is_ok() && needs.fits_in(&it.allocatable())
        })
        .filter_map(|it| {
            let offerings: Vec<_> = it.offerings_for(&requirements).collect();
            let price = offerings.iter().map(|o| o.price).min_by(f64::total_cmp)?;
            let zones: BTreeSet<String> = offerings.iter().map(|o| o.zone.clone()).collect();
            let vcpus = cpu(it) as f64 / 1000.0;
            Some(Choice {
                unusual: !(4.0..=16.0).contains(&vcpus) || (!wants_gpu && it.is_exotic()),
                per_vcpu: price / vcpus,
                it,
                price,
                zones: zones.into_iter().collect(),
            })
        })
        .min_by(|a, b| {
            a.unusual
                .cmp(&b.unusual)
                .then(a.per_vcpu.total_cmp(&b.per_vcpu))
                .then(cpu(a.it).cmp(&cpu(b.it)))
                .then(a.it.name.cmp(&b.it.name))
        })
        .map(|c| (c.it.clone(), c.price, c.zones))
}
