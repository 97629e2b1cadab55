//! `karpenter bench consolidation`: a cluster our solver packed for one of upstream's pod
//! lists, with a seeded half of its pods then deleted, consolidated to its fixed point by
//! the disruption pass — the commands the controller would issue one after another, each
//! applied at once (replacements up, candidates gone, moved pods where the simulation put
//! them) instead of waiting for nodes. The same cluster is consolidated by our search and by
//! upstream's greedy one ([`Search::Upstream`]), so every row has its baseline.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use karpenter_core::api::nodepool::{ConsolidationPolicy, default_budgets};
use karpenter_core::disruption::consolidation::Search;
use karpenter_core::disruption::pass::{self, Decision, Options};
use karpenter_core::disruption::{NodeSnapshot, PodSnapshot, PoolPolicy, Snapshot};
use karpenter_core::events::NodeClaimState;
use karpenter_core::model::pod::PodAffinityTerm;
use karpenter_core::model::{InstanceType, Pod, Requirement, Requirements, Resources};
use karpenter_core::ports::OfferingKey;
use karpenter_core::scheduling::bound::cost_lower_bound;
use karpenter_core::scheduling::{
    ExistingNode, PlannedNodeClaim, PoolCache, SchedulingInput, anti_affinity_of, solve,
};
use karpenter_core::vocab::labels;

/// When the bench's clock starts (ms since the Unix epoch); nodes initialized a day before.
const START_MS: i64 = 1_800_000_000_000;
const DAY_MS: i64 = 24 * 3_600_000;
/// The loop stops here even without a fixed point.
const MAX_COMMANDS: usize = 10_000;

/// A node of the bench's cluster.
#[derive(Debug, Clone)]
struct FleetNode {
    nodepool: String,
    instance_type: Arc<InstanceType>,
    offering: OfferingKey,
    price: f64,
    initialized_ms: i64,
    pods: Vec<Pod>,
}

impl FleetNode {
    fn labels(&self, name: &str) -> BTreeMap<String, String> {
        let mut out = self.instance_type.labels.clone();
        out.insert(
            labels::INSTANCE_TYPE.into(),
            self.offering.instance_type.clone(),
        );
        out.insert(labels::ZONE.into(), self.offering.zone.clone());
        out.insert(
            labels::CAPACITY_TYPE.into(),
            self.offering.capacity_type.as_str().into(),
        );
        out.insert(labels::NODEPOOL.into(), self.nodepool.clone());
        out.insert(labels::HOSTNAME.into(), name.to_owned());
        out
    }

    fn existing(&self, name: &str) -> ExistingNode {
        ExistingNode {
            name: name.to_owned(),
            labels: self.labels(name),
            taints: Vec::new(),
            allocatable: self.instance_type.allocatable(),
            requested: self
                .pods
                .iter()
                .fold(Resources::ZERO, |acc, p| acc.add(&p.requests)),
            pods: self
                .pods
                .iter()
                .map(|p| (p.namespace.clone(), p.labels.clone()))
                .collect(),
            anti_affinity: self.pods.iter().flat_map(anti_affinity_of).collect(),
            host_ports: self
                .pods
                .iter()
                .flat_map(|p| p.host_ports.iter().cloned())
                .collect(),
            attach_limits: BTreeMap::new(),
            attached: Vec::new(),
        }
    }

    fn snapshot(&self, name: &str) -> NodeSnapshot {
        NodeSnapshot {
            nodeclaim: name.to_owned(),
            nodepool: self.nodepool.clone(),
            node: Some(name.to_owned()),
            state: NodeClaimState::Initialized,
            ready: true,
            command: None,
            nominated: false,
            do_not_disrupt: false,
            created_ms: self.initialized_ms - 60_000,
            initialized_ms: Some(self.initialized_ms),
            last_pod_event_ms: None,
            expire_after: Some(Duration::from_secs(720 * 3600)),
            termination_grace_period: None,
            drifted: None,
            price: self.price,
            offering: Some(self.offering.clone()),
            pods: self
                .pods
                .iter()
                .map(|p| PodSnapshot {
                    node: name.to_owned(),
                    pod: p.clone(),
                    reschedulable: true,
                    do_not_disrupt: None,
                    created_ms: None,
                    pdbs: Vec::new(),
                })
                .collect(),
            conditions: Vec::new(),
        }
    }
}

/// A cluster the bench consolidates: nodes by name, and the round input they came from
/// (its NodePools and policies).
#[derive(Debug, Clone)]
pub struct Fleet {
    nodes: BTreeMap<String, FleetNode>,
    template: SchedulingInput,
    now_ms: i64,
    next: usize,
    /// The `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
    /// Every NodePool's `consolidationPolicy`.
    pub policy: ConsolidationPolicy,
}

impl Fleet {
    /// A cluster without nodes of `template`'s NodePools.
    fn empty(template: SchedulingInput) -> Fleet {
        Fleet {
            nodes: BTreeMap::new(),
            template,
            now_ms: START_MS,
            next: 0,
            spot_to_spot: false,
            policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
        }
    }

    /// The cluster `input`'s round would make: every planned NodeClaim launched at its
    /// cheapest option, with its pods bound.
    pub fn packed(input: &SchedulingInput) -> anyhow::Result<Fleet> {
        let result = solve(input);
        if let Some(u) = result.unschedulable.first() {
            bail!(
                "{} pods left unplaced packing the cluster, e.g. {}: {}",
                result.unschedulable.len(),
                u.pod,
                u.reason
            );
        }
        let mut template = input.clone();
        let pods: BTreeMap<&str, &Pod> = input.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        template.pods = Vec::new();
        let mut fleet = Fleet::empty(template);
        for claim in &result.new_claims {
            let claim_pods = claim
                .pods
                .iter()
                .filter_map(|uid| pods.get(uid.as_str()).map(|p| (*p).clone()))
                .collect();
            fleet.launch(claim, claim_pods, START_MS - DAY_MS)?;
        }
        Ok(fleet)
    }

    fn launch(
        &mut self,
        claim: &PlannedNodeClaim,
        pods: Vec<Pod>,
        initialized_ms: i64,
    ) -> anyhow::Result<String> {
        let option = claim
            .instance_types
            .first()
            .with_context(|| format!("a NodeClaim of {} has no instance type", claim.nodepool))?;
        let instance_type = self
            .template
            .nodepools
            .iter()
            .filter(|p| p.name == claim.nodepool)
            .flat_map(|p| p.instance_types.iter())
            .find(|t| t.name.as_str() == option.name.as_str())
            .with_context(|| format!("instance type {} not in its pool", option.name))?
            .clone();
        let name = format!("node-{:05}", self.next);
        self.next += 1;
        self.nodes.insert(
            name.clone(),
            FleetNode {
                nodepool: claim.nodepool.clone(),
                instance_type,
                offering: OfferingKey {
                    instance_type: option.name.to_string(),
                    zone: option.zone.to_string(),
                    capacity_type: option.capacity_type,
                },
                price: option.price,
                initialized_ms,
                pods,
            },
        );
        Ok(name)
    }

    /// Deletes every pod `keep` refuses; nodes left empty stay (emptiness removes them).
    pub fn delete_pods(&mut self, mut keep: impl FnMut(&Pod) -> bool) {
        for node in self.nodes.values_mut() {
            node.pods.retain(&mut keep);
        }
    }

    /// Nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Pods bound.
    pub fn pods(&self) -> usize {
        self.nodes.values().map(|n| n.pods.len()).sum()
    }

    /// $/h of its nodes.
    pub fn cost(&self) -> f64 {
        karpenter_core::model::total_price(self.nodes.values().map(|n| n.price))
    }

    /// The least $/h any fleet of its NodePools' types holding its pods could cost.
    pub fn bound(&self) -> anyhow::Result<f64> {
        let mut input = self.template.clone();
        input.pods = self.nodes.values().flat_map(|n| n.pods.clone()).collect();
        Ok(cost_lower_bound(&input)?)
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            now_ms: self.now_ms,
            pools: self
                .template
                .nodepools
                .iter()
                .map(|p| PoolPolicy {
                    name: p.name.clone(),
                    budgets: default_budgets(),
                    consolidate_after: Some(Duration::ZERO),
                    policy: self.policy,
                    replicas: None,
                    node_limit: None,
                })
                .collect(),
            nodes: self.nodes.iter().map(|(n, f)| f.snapshot(n)).collect(),
            pdbs: BTreeMap::new(),
            spot_to_spot: self.spot_to_spot,
            static_capacity: false,
            buffered: Default::default(),
            repair: None,
            scaling_out: Default::default(),
        }
    }

    fn base(&self) -> SchedulingInput {
        let mut base = self.template.clone();
        base.existing = self
            .nodes
            .iter()
            .map(|(n, f)| Arc::new(f.existing(n)))
            .collect();
        base
    }

    /// Carries out `decision` at once: its replacements up with the pods the simulation put
    /// there, its candidates gone, the other moved pods on the nodes it bound them to.
    fn apply(&mut self, decision: &Decision) -> anyhow::Result<usize> {
        let mut moved: BTreeMap<String, Pod> = BTreeMap::new();
        for name in &decision.candidates {
            let node = self
                .nodes
                .remove(name)
                .with_context(|| format!("candidate {name} is not in the cluster"))?;
            moved.extend(node.pods.into_iter().map(|p| (p.uid.clone(), p)));
        }
        let count = moved.len();
        let Some(simulation) = &decision.simulation else {
            if count > 0 {
                bail!("a command without a simulation moved {count} pods");
            }
            return Ok(0);
        };
        for binding in &simulation.result.bindings {
            if let Some(pod) = moved.remove(&binding.pod) {
                self.nodes
                    .get_mut(&binding.node)
                    .with_context(|| format!("pod {} bound to unknown {}", pod.uid, binding.node))?
                    .pods
                    .push(pod);
            }
        }
        for replacement in &decision.replacements {
            let pods = replacement
                .pods
                .iter()
                .filter_map(|uid| moved.remove(uid))
                .collect();
            self.launch(replacement, pods, self.now_ms)?;
        }
        if let Some((uid, _)) = moved.first_key_value() {
            bail!("{} moved pods were placed nowhere, e.g. {uid}", moved.len());
        }
        Ok(count)
    }

    /// Every constraint a placement must keep, checked node by node: requests within
    /// allocatable, the pod's required node affinity matched by the node's labels, required
    /// pod anti-affinity kept on the node, required zone affinity met in the node's zone.
    /// (Topology spreads are kept by the solver at each placement; deleting pods may skew
    /// them, as in a real cluster.)
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let zone_of: BTreeMap<&str, String> = self
            .nodes
            .iter()
            .map(|(n, f)| (n.as_str(), f.offering.zone.clone()))
            .collect();
        for (name, node) in &self.nodes {
            let labels = node.labels(name);
            let requested = node
                .pods
                .iter()
                .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
            if !requested.fits_in(&node.instance_type.allocatable()) {
                out.push(format!("{name}: pods request more than it has"));
            }
            for pod in &node.pods {
                if !pod
                    .requirement_alternatives()
                    .iter()
                    .any(|r| r.admits(&labels))
                {
                    out.push(format!("{name}: {} does not match its labels", pod.uid));
                }
                for term in pod.pod_affinity.iter() {
                    let selects = |other: &Pod| term_selects(term, pod, other);
                    if term.anti && term.topology_key == labels::HOSTNAME {
                        if let Some(other) =
                            node.pods.iter().find(|o| o.uid != pod.uid && selects(o))
                        {
                            out.push(format!("{name}: {} beside {}", pod.uid, other.uid));
                        }
                    } else if !term.anti && term.topology_key == labels::ZONE {
                        let zone = &zone_of[name.as_str()];
                        let met = self.nodes.iter().any(|(n, f)| {
                            &zone_of[n.as_str()] == zone && f.pods.iter().any(&selects)
                        });
                        if !met {
                            out.push(format!("{name}: {} has no affine pod in {zone}", pod.uid));
                        }
                    }
                }
            }
        }
        out
    }
}

fn term_selects(term: &PodAffinityTerm, owner: &Pod, other: &Pod) -> bool {
    (term.namespaces.is_empty() && other.namespace == owner.namespace
        || term.namespaces.contains(&other.namespace)
        || term.all_namespaces)
        && term
            .selector
            .iter()
            .all(|(k, v)| other.labels.get(k) == Some(v))
}

/// A fixed point reached by one search.
#[derive(Debug, Clone)]
pub struct Run {
    /// Time to the first consolidation (`Underutilized`) command.
    pub first: Option<Duration>,
    /// Time to the fixed point: every pass, including the last one that found nothing.
    pub total: Duration,
    /// Commands, by method name.
    pub commands: BTreeMap<&'static str, usize>,
    /// Nodes disrupted.
    pub disrupted: usize,
    /// Pods moved.
    pub moved: usize,
    /// Scheduling simulations run.
    pub simulations: usize,
    /// $/h at the fixed point.
    pub after: f64,
    /// Nodes at the fixed point.
    pub nodes: usize,
    /// The cluster at the fixed point, or where the run stopped.
    pub fleet: Fleet,
    /// Stopped at its time limit before the fixed point.
    pub capped: bool,
}

/// Consolidates `fleet` to its fixed point with `search`, or until `limit` has passed (the
/// command in flight then finishes and the run is marked capped).
pub fn consolidate(
    mut fleet: Fleet,
    search: Search,
    limit: Option<Duration>,
) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut run = Run {
        first: None,
        total: Duration::ZERO,
        commands: BTreeMap::new(),
        disrupted: 0,
        moved: 0,
        simulations: 0,
        after: 0.0,
        nodes: 0,
        fleet: fleet.clone(),
        capped: false,
    };
    // What the controller carries from one pass to the next.
    let mut refused = BTreeSet::new();
    let cache = PoolCache::default();
    for _ in 0..MAX_COMMANDS {
        if limit.is_some_and(|limit| started.elapsed() > limit) {
            run.capped = true;
            break;
        }
        let snapshot = fleet.snapshot();
        let base = fleet.base();
        let options = Options {
            search,
            timeouts: true,
            consolidated: None,
            unconsolidatable: &refused,
            repair: None,
            cache: Some(&cache),
            catalogs: None,
        };
        let result = pass::run_with(&snapshot, Some(&base), options);
        if let Some(next) = result.unconsolidatable_next {
            refused = next;
        }
        run.simulations += result.simulations;
        let Some(decision) = result.command else {
            break;
        };
        if decision.method.consolidates() && run.first.is_none() {
            run.first = Some(started.elapsed());
        }
        *run.commands.entry(decision.method.name()).or_default() += 1;
        run.disrupted += decision.candidates.len();
        run.moved += fleet.apply(&decision)?;
        fleet.now_ms += 1_000;
    }
    run.total = started.elapsed();
    run.after = fleet.cost();
    run.nodes = fleet.len();
    run.fleet = fleet;
    Ok(run)
}

/// The NodePool of the built-in scenario the AWS-catalog case packs with.
pub const AWS_NODEPOOL: &str = "general-purpose";

/// Upstream's pod list of `size` pods for the built-in scenario's general-purpose NodePool
/// (its requirements: c, m and r families of generation 5 and later, under 33 vCPUs, spot
/// or on-demand) over the embedded AWS catalog of the scenario's region.
pub fn aws_input(size: usize) -> anyhow::Result<SchedulingInput> {
    let scenario = crate::sim::scenario::parse(crate::sim::scenario::BUILT_IN, "built-in")?;
    let pool = scenario
        .nodepools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(AWS_NODEPOOL))
        .with_context(|| format!("the built-in scenario has no NodePool {AWS_NODEPOOL}"))?;
    let mut requirements = Requirements::from_api(&pool.spec.template.spec.requirements);
    requirements.add(labels::NODEPOOL, Requirement::is_in([AWS_NODEPOOL]));
    let mut input = super::benchmark_input(size)?;
    let template = input
        .nodepools
        .first_mut()
        .context("the benchmark input has no NodePool")?;
    template.name = AWS_NODEPOOL.into();
    template.requirements = requirements;
    template.instance_types = crate::system::catalog_instance_types(&scenario.file.region)?;
    Ok(input)
}

/// A generator of the seeded draws (splitmix64).
pub struct Draws(u64);

impl Draws {
    /// Draws from `seed`.
    pub fn new(seed: u64) -> Self {
        Draws(seed)
    }

    /// Whether the next draw falls in the lower half.
    pub fn coin(&mut self) -> bool {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) >> 63 == 0
    }
}

/// One case: its cluster before, and both searches' fixed points.
#[derive(Debug, Clone)]
pub struct Case {
    /// What was run.
    pub label: String,
    /// Nodes before.
    pub nodes: usize,
    /// Pods left after the deletion.
    pub pods: usize,
    /// $/h before.
    pub before: f64,
    /// The lower bound on $/h for the pods left.
    pub bound: f64,
    /// Our search (`WhenEmptyOrUnderutilized`).
    pub ours: Run,
    /// Our search with every NodePool `Balanced`, where the case runs it.
    pub balanced: Option<Run>,
    /// Upstream's greedy search, unless the baseline was skipped.
    pub upstream: Option<Run>,
}

/// How a case is run.
#[derive(Debug, Clone, Copy)]
pub struct CaseOptions {
    /// Seed of the pods deleted.
    pub seed: u64,
    /// Also consolidate with upstream's search.
    pub baseline: bool,
    /// Stop upstream's search after this long (its row then says so).
    pub baseline_limit: Option<Duration>,
    /// The `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
}

/// Packs `input`, deletes a seeded half of its pods and consolidates with our search (as
/// `WhenEmptyOrUnderutilized` and as `Balanced`) and, with `baseline`, upstream's.
pub fn run_case(
    label: &str,
    input: &SchedulingInput,
    options: CaseOptions,
) -> anyhow::Result<Case> {
    let CaseOptions {
        seed,
        baseline,
        baseline_limit,
        spot_to_spot,
    } = options;
    let mut fleet = Fleet::packed(input)?;
    fleet.spot_to_spot = spot_to_spot;
    let mut draws = Draws::new(seed);
    // Pods in a fixed order, each kept or deleted by one draw.
    let doomed: BTreeSet<String> = input
        .pods
        .iter()
        .filter(|_| draws.coin())
        .map(|p| p.uid.clone())
        .collect();
    fleet.delete_pods(|p| !doomed.contains(&p.uid));
    run_fleet(label, fleet, true, baseline.then_some(baseline_limit))
}

/// Consolidates `fleet` with our search, as `Balanced` too with `balanced`, and with
/// upstream's when `baseline` gives its time limit.
pub fn run_fleet(
    label: &str,
    fleet: Fleet,
    balanced: bool,
    baseline: Option<Option<Duration>>,
) -> anyhow::Result<Case> {
    let bound = fleet.bound().context("lower bound for the pods left")?;
    Ok(Case {
        label: label.to_owned(),
        nodes: fleet.len(),
        pods: fleet.pods(),
        before: fleet.cost(),
        bound,
        ours: consolidate(fleet.clone(), Search::Cluster, None)?,
        balanced: if balanced {
            Some(consolidate(
                Fleet {
                    policy: ConsolidationPolicy::Balanced,
                    ..fleet.clone()
                },
                Search::Cluster,
                None,
            )?)
        } else {
            None
        },
        upstream: match baseline {
            Some(limit) => Some(consolidate(fleet, Search::Upstream, limit)?),
            None => None,
        },
    })
}

pub mod one_pod_per_node;

#[cfg(test)]
mod tests;
