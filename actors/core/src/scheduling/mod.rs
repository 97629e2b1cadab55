//! One binpacking round, pure and deterministic: pending pods and the cluster in, bindings to
//! existing nodes, planned NodeClaims and reasons for the rest out.
//!
//! The objective is the $/h of the new NodeClaims, each launching as the cheapest instance
//! type that holds its pods. Pods are placed one at a time: pods that need a node of their
//! own (hostname anti-affinity they match themselves) first, then by dominant share of a
//! typical instance type, largest first. Each goes to the first existing node with room,
//! else to a planned NodeClaim it joins without raising that claim's price (the one left
//! tightest among the first few an index of spare room finds), else to whichever of growing
//! a claim and opening a new one costs less per unit of capacity bought. Afterwards, claims
//! of the same pool and requirements merge where one type for both costs less than two, and
//! each claim sheds the pods that keep it one price step up to claims that take them for
//! free, or, failing that, its pods and those of the roomiest claims of its class are
//! repacked together with it one step cheaper. Rounds of up to
//! [`FIRST_FIT_GUARD_MAX_PODS`] pods are also packed first-fit decreasing (upstream's way,
//! [`Packing::FirstFit`]), small rounds and rounds without topology constraints also in
//! [`Order::Balanced`], and the cheapest plan wins.
//! [`bound::cost_lower_bound`] is the lower bound plans are measured against. A
//! planned NodeClaim keeps every instance type that still fits its pods, so the launch can
//! fall back to the next cheapest.
//!
//! Modelled here: requests (with daemonset overhead per NodePool), node selectors and
//! required node affinity (OR of terms), taints and tolerations, NodePool requirements,
//! limits (pessimistically: a planned NodeClaim reserves the largest capacity among its
//! options) and weights, minValues, exotic instance types only for pods that need them, host
//! ports, and topology spread over any node label (`matchLabels`, `matchExpressions` and
//! `matchLabelKeys` selectors, maxSkew, minDomains, the node affinity and taints policies;
//! `DoNotSchedule` kept, `ScheduleAnyway` tried then relaxed): a spread pod is pinned to the
//! emptiest allowed domain that takes it; and required pod affinity and anti-affinity on
//! any key (selectors as for spread plus `mismatchLabelKeys`; explicit namespaces, a
//! `namespaceSelector` on namespace labels, or an empty one for all), where the first of a
//! group of pods with affinity to each other may go anywhere. Preferences (preferred node
//! and pod affinity, `ScheduleAnyway` spreads) are required at first and relaxed one at a
//! time in upstream's order ([`relaxations`]), or ignored under [`PreferencePolicy::Ignore`];
//! `PreferNoSchedule` taints keep pods off until their very last attempt. A pod's required
//! anti-affinity also keeps the pods it selects out of its node or domain, for pods on
//! existing nodes and pods placed this round alike (kube-scheduler checks both directions).
//! Pods moved after the greedy pass keep the constraints they were placed under and those
//! of the pods they join (anti-affinity both ways, hostname spread counted with the
//! newcomer, host ports) and their domains unless nothing counts them there. Volume
//! topology arrives as [`Pod::volume_requirements`] (see [`crate::model::volumes`]), which
//! narrow where a pod may go but not which nodes its spreads count; existing nodes take no
//! more volumes than their CSI drivers attach. Namespace selectors on labels are resolved
//! against [`SchedulingInput::namespace_labels`] before the round. A constraint that cannot
//! be read (an unknown operator or policy) makes the pod unschedulable with it named, never
//! placed while ignoring it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use crate::model::pod::{HostPort, PodAffinityTerm, TopologySpread, ports_conflict};
use crate::model::requirements::Incompatible;
use crate::model::taints::{untolerated, untolerated_avoiding};
use crate::model::volumes::{VolumeAttachment, attachments_fit};
use crate::model::{InstanceType, Pod, Requirement, Requirements, ResourceName, Resources, Taint};
use crate::vocab::labels;
use topology::{CountKey, Domain, Topology};

pub mod bound;
#[cfg(test)]
mod tests;
mod topology;

/// Limits of a NodePool; absent entries are unlimited.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Per-resource caps on the summed capacity of the pool's nodes.
    pub resources: BTreeMap<ResourceName, i64>,
    /// Cap on the number of nodes.
    pub nodes: Option<i64>,
}

/// A NodePool as one round sees it.
#[derive(Debug, Clone)]
pub struct NodePoolTemplate {
    /// Name.
    pub name: String,
    /// Higher is tried first.
    pub weight: i32,
    /// The pool's requirements intersected with its template labels.
    pub requirements: Requirements,
    /// Taints of its nodes (startup taints are not included: pods need not tolerate them).
    pub taints: Vec<Taint>,
    /// Instance types the pool's node class can launch.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Limits.
    pub limits: Limits,
    /// Summed capacity of the pool's existing and in-flight nodes.
    pub usage: Resources,
    /// Number of existing and in-flight nodes.
    pub node_count: i64,
}

/// A pod's namespace and labels: what spread constraints count.
pub type PodLabels = (String, BTreeMap<String, String>);

/// A required pod anti-affinity term and the namespace of the pod that has it.
pub type AntiAffinityOf = (String, crate::model::pod::PodAffinityTerm);

/// The required anti-affinity terms of a pod, each with its namespace.
pub fn anti_affinity_of(pod: &Pod) -> impl Iterator<Item = AntiAffinityOf> + '_ {
    pod.pod_affinity
        .iter()
        .filter(|t| t.anti)
        .map(|t| (pod.namespace.clone(), t.clone()))
}

/// A node (or a launched NodeClaim not yet a node) pods can be bound to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExistingNode {
    /// Node (or NodeClaim) name.
    pub name: String,
    /// Labels (for a launched NodeClaim: the labels its node will have).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Resources,
    /// Already requested by bound or nominated pods and daemonsets.
    pub requested: Resources,
    /// The pods on it (for topology spread).
    #[serde(default)]
    pub pods: Vec<PodLabels>,
    /// Required anti-affinity terms of the pods on it, which keep pods they select off it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<AntiAffinityOf>,
    /// Host ports its pods bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// Per CSI driver, how many volumes it can have attached (CSINode `allocatable.count`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attach_limits: BTreeMap<String, i64>,
    /// Volumes its pods have attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<VolumeAttachment>,
}

/// Whether pods' preferences (preferred node and pod affinity, `ScheduleAnyway` spreads)
/// are honoured where they can be (relaxed one at a time, in upstream's order, where they
/// cannot) or ignored (`--preference-policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PreferencePolicy {
    /// Honour them where possible.
    #[default]
    Respect,
    /// Ignore them.
    Ignore,
}

impl std::str::FromStr for PreferencePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_choice(
            s,
            "preference policy",
            &[
                ("Respect", PreferencePolicy::Respect),
                ("Ignore", PreferencePolicy::Ignore),
            ],
        )
    }
}

/// The choice named `s` (as written, or in lower case), or an error naming `what` and the
/// choices.
fn parse_choice<T: Copy>(s: &str, what: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == s || name.to_lowercase() == s)
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            format!("unknown {what} {s:?}; use {}", names.join(" or "))
        })
}

/// What to do when a NodeClaim cannot keep a requirement's `minValues` distinct values
/// (`--min-values-policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MinValuesPolicy {
    /// The pod stays unschedulable.
    #[default]
    Strict,
    /// As a pod's last attempt, the NodeClaim launches with what is left and is marked
    /// [`PlannedNodeClaim::min_values_relaxed`].
    BestEffort,
}

impl std::str::FromStr for MinValuesPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_choice(
            s,
            "minValues policy",
            &[
                ("Strict", MinValuesPolicy::Strict),
                ("BestEffort", MinValuesPolicy::BestEffort),
            ],
        )
    }
}

/// Everything one round needs.
#[derive(Debug, Clone, Default)]
pub struct SchedulingInput {
    /// Pods to place.
    pub pods: Vec<Pod>,
    /// NodePools that may create NodeClaims.
    pub nodepools: Vec<NodePoolTemplate>,
    /// Nodes and launched NodeClaims with room.
    pub existing: Vec<ExistingNode>,
    /// Pod templates of the DaemonSets, whose requests every compatible new node carries.
    pub daemonsets: Vec<Pod>,
    /// What to do with the pods' preferences.
    pub preference_policy: PreferencePolicy,
    /// What to do when minValues cannot be kept.
    pub min_values_policy: MinValuesPolicy,
    /// Labels of the cluster's namespaces, which pod affinity namespace selectors select.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// The input as the solver works on it: pods in UID order and existing nodes in name order,
/// so that no decision (every tie is broken by position) depends on the order the caller
/// listed them in; and every pod affinity `namespaceSelector` resolved, the namespaces it
/// selects added to the term's explicit list. Borrowed unchanged when already so.
fn canonical(input: &SchedulingInput) -> Cow<'_, SchedulingInput> {
    fn has_selector<'a>(mut terms: impl Iterator<Item = &'a PodAffinityTerm>) -> bool {
        terms.any(|t| t.namespace_selector.is_some())
    }
    let needed = input.pods.iter().any(|p| {
        has_selector(
            p.pod_affinity
                .iter()
                .chain(p.preferred_pod_affinity.iter().map(|(_, t)| t)),
        )
    }) || input
        .existing
        .iter()
        .any(|n| has_selector(n.anti_affinity.iter().map(|(_, t)| t)));
    let in_order = input.pods.is_sorted_by(|a, b| a.uid <= b.uid)
        && input.existing.is_sorted_by(|a, b| a.name <= b.name);
    if !needed && in_order {
        return Cow::Borrowed(input);
    }
    let resolve = |term: &mut PodAffinityTerm| {
        if let Some(selector) = &term.namespace_selector {
            let selected = input
                .namespace_labels
                .iter()
                .filter(|(_, labels)| selector.matches(labels))
                .map(|(name, _)| name.clone());
            term.namespaces.extend(selected);
            term.namespaces.sort();
            term.namespaces.dedup();
        }
    };
    let mut resolved = input.clone();
    resolved.pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    resolved.existing.sort_by(|a, b| a.name.cmp(&b.name));
    for pod in &mut resolved.pods {
        pod.pod_affinity.iter_mut().for_each(resolve);
        pod.preferred_pod_affinity
            .iter_mut()
            .for_each(|(_, t)| resolve(t));
    }
    for node in &mut resolved.existing {
        node.anti_affinity.iter_mut().for_each(|(_, t)| resolve(t));
    }
    Cow::Owned(resolved)
}

/// An instance type a planned NodeClaim may launch as, with its cheapest allowed offering.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceTypeOption {
    /// Instance type name (shared: a round lists thousands of options).
    pub name: Arc<str>,
    /// USD/hour of the cheapest offering the NodeClaim's requirements allow.
    pub price: f64,
    /// Zone of that offering.
    pub zone: Arc<str>,
    /// Capacity type of that offering.
    pub capacity_type: crate::model::CapacityType,
}

/// A NodeClaim the round wants launched.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedNodeClaim {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// Pool requirements narrowed by its pods.
    pub requirements: Requirements,
    /// Every instance type that fits, cheapest first.
    pub instance_types: Vec<InstanceTypeOption>,
    /// UIDs of the pods planned onto it.
    pub pods: Vec<String>,
    /// Requests of those pods plus daemonset overhead.
    pub requests: Resources,
    /// Launched with fewer distinct values than a requirement's minValues asks for
    /// ([`MinValuesPolicy::BestEffort`]); its NodeClaim carries
    /// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
    pub min_values_relaxed: bool,
}

impl SchedulingResult {
    /// $/h of the new NodeClaims, each at its cheapest option (the offering it would launch).
    pub fn new_capacity_cost(&self) -> f64 {
        self.new_claims
            .iter()
            .filter_map(|c| c.instance_types.first())
            .map(|o| o.price)
            .sum()
    }
}

/// A pod bound to an existing node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Pod UID.
    pub pod: String,
    /// Node name.
    pub node: String,
}

/// A pod no node can take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    /// Pod UID.
    pub pod: String,
    /// One reason per NodePool, like kube-scheduler's FailedScheduling messages.
    pub reason: String,
}

/// What a round decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulingResult {
    /// Pods placed on existing nodes.
    pub bindings: Vec<Binding>,
    /// NodeClaims to create.
    pub new_claims: Vec<PlannedNodeClaim>,
    /// Pods left pending.
    pub unschedulable: Vec<Unschedulable>,
}

struct PoolState {
    /// Indices of launchable types (offering available, compatible with the pool).
    types: Vec<usize>,
    /// Allocatable of every instance type of the pool, by index.
    allocatable: Vec<Resources>,
    /// Whether each instance type is exotic (GPU, accelerator, metal), by index.
    exotic: Vec<bool>,
    /// The pool's requirements (id in the round's [`RequirementTable`]).
    requirements: usize,
    daemon: Resources,
    /// Limit headroom, `None` where unlimited.
    headroom: [Option<i64>; crate::model::resources::RESOURCE_COUNT],
    nodes_left: Option<i64>,
}

struct ClaimState {
    pool: usize,
    /// Id in the round's [`RequirementTable`].
    requirements: usize,
    /// Whether GPU, accelerator and metal types may be launched (a pod needs one).
    exotic_ok: bool,
    /// Types that fit `requests` within limits, cheapest first under `requirements`.
    types: Vec<Priced>,
    max_allocatable: Resources,
    reserved: Resources,
    requests: Resources,
    pods: Vec<usize>,
    /// Launches with fewer distinct values than minValues asks for (BestEffort).
    min_values_relaxed: bool,
}

/// The NodeClaims planned so far, with an index of those that still have room for the
/// smallest pod of the round at their current price: a grid of spare CPU × spare memory
/// buckets (half-octaves), each ordered by exact spare room, so a pod finds the tightest
/// claim it fits without looking at the ones it cannot.
struct Claims {
    all: Vec<ClaimState>,
    open: Vec<BTreeSet<Spare>>,
    /// Per CPU bucket, a bit per memory bucket whose set is not empty.
    rows: [u128; SPARE_BUCKETS],
    /// A bit per CPU bucket with any claim.
    nonempty_rows: u128,
    /// Each claim's bucket and key in `open`, if it is there.
    open_keys: Vec<Option<(usize, Spare)>>,
    /// Per resource, the smallest request of any pod in the round.
    smallest: Resources,
    /// Memory that counts as much as one vCPU when sizing capacity (see [`Claims::gained`]).
    bytes_per_core: f64,
}

/// Spare CPU (millicores) and memory (bytes) of a claim at its current price, and its index.
type Spare = (i64, i64, usize);

/// Buckets per resource: two per power of two up to 2^63.
const SPARE_BUCKETS: usize = 128;

/// Half-octave bucket of a quantity: values in one bucket differ by less than 1.5×.
fn spare_bucket(value: i64) -> usize {
    if value <= 1 {
        return 0;
    }
    let octave = 63 - value.leading_zeros() as usize;
    let upper_half = (value >> (octave - 1)) & 1;
    2 * octave + upper_half as usize
}

/// Positions of the set bits of `mask` from `from` upwards.
fn set_bits(mask: u128, from: usize) -> impl Iterator<Item = usize> {
    let mut rest = if from >= 128 { 0 } else { mask >> from << from };
    std::iter::from_fn(move || {
        (rest != 0).then(|| {
            let bit = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            bit
        })
    })
}

impl Claims {
    fn new(pods: &[Pod], bytes_per_core: f64) -> Self {
        let mut smallest = Resources::ZERO;
        for r in [ResourceName::Cpu, ResourceName::Memory, ResourceName::Pods] {
            smallest.set(r, pods.iter().map(|p| p.requests.get(r)).min().unwrap_or(0));
        }
        Claims {
            all: Vec::new(),
            open: vec![BTreeSet::new(); SPARE_BUCKETS * SPARE_BUCKETS],
            rows: [0; SPARE_BUCKETS],
            nonempty_rows: 0,
            open_keys: Vec::new(),
            smallest,
            bytes_per_core,
        }
    }

    /// The capacity a claim holding `used` gains by launching as a type with allocatable
    /// `after` instead of `before`: in vCPU-equivalents (CPU, or memory at the round's typical
    /// memory per vCPU, whichever is larger), or, for a pod that needs GPUs or other
    /// accelerators, in copies of that pod, since that is the capacity it buys.
    fn gained(&self, pod: &Pod, used: &Resources, before: &Resources, after: &Resources) -> f64 {
        let gained = if pod.needs_exotic() {
            let copies = |allocatable: &Resources| {
                copies_fitting(&pod.requests, &allocatable.sub(used)) as f64
            };
            copies(after) - copies(before)
        } else {
            let units = |r: &Resources| {
                let cpu = r.get(ResourceName::Cpu) as f64 / 1000.0;
                let memory = r.get(ResourceName::Memory) as f64 / self.bytes_per_core;
                cpu.max(memory)
            };
            units(after) - units(before)
        };
        gained.max(MIN_GAIN)
    }

    fn push(&mut self, claim: ClaimState, allocatable: &[Resources]) -> usize {
        self.all.push(claim);
        self.open_keys.push(None);
        let index = self.all.len() - 1;
        self.reindex(index, allocatable);
        index
    }

    /// Files the claim under its spare room at its cheapest type after it changed.
    fn reindex(&mut self, index: usize, allocatable: &[Resources]) {
        if let Some((bucket, key)) = self.open_keys[index].take() {
            self.open[bucket].remove(&key);
            if self.open[bucket].is_empty() {
                let (row, column) = (bucket / SPARE_BUCKETS, bucket % SPARE_BUCKETS);
                self.rows[row] &= !(1 << column);
                if self.rows[row] == 0 {
                    self.nonempty_rows &= !(1 << row);
                }
            }
        }
        let claim = &self.all[index];
        let Some(cheapest) = claim.types.first() else {
            return;
        };
        let spare = allocatable[cheapest.index].sub(&claim.requests);
        if self.smallest.fits_in(&spare) {
            let (cpu, memory) = (
                spare.get(ResourceName::Cpu),
                spare.get(ResourceName::Memory),
            );
            let (row, column) = (spare_bucket(cpu), spare_bucket(memory));
            let bucket = row * SPARE_BUCKETS + column;
            let key = (cpu, memory, index);
            self.open[bucket].insert(key);
            self.rows[row] |= 1 << column;
            self.nonempty_rows |= 1 << row;
            self.open_keys[index] = Some((bucket, key));
        }
    }

    /// Open claims with at least `requests` CPU and memory to spare, tightest buckets first.
    fn with_room(&self, requests: &Resources) -> impl Iterator<Item = usize> + '_ {
        let (cpu, memory) = (
            requests.get(ResourceName::Cpu),
            requests.get(ResourceName::Memory),
        );
        let column = spare_bucket(memory);
        set_bits(self.nonempty_rows, spare_bucket(cpu))
            .flat_map(move |row| {
                set_bits(self.rows[row], column).map(move |c| row * SPARE_BUCKETS + c)
            })
            .flat_map(|bucket| self.open[bucket].iter())
            .filter(move |(c, m, _)| *c >= cpu && *m >= memory)
            .map(|(_, _, index)| *index)
    }

    /// Open claims short of `requests` in CPU or memory, tightest buckets first.
    fn without_room(&self, requests: &Resources) -> impl Iterator<Item = usize> + '_ {
        let (cpu, memory) = (
            requests.get(ResourceName::Cpu),
            requests.get(ResourceName::Memory),
        );
        set_bits(self.nonempty_rows, 0)
            .flat_map(move |row| set_bits(self.rows[row], 0).map(move |c| row * SPARE_BUCKETS + c))
            .flat_map(|bucket| self.open[bucket].iter())
            .filter(move |(c, m, _)| *c < cpu || *m < memory)
            .map(|(_, _, index)| *index)
    }
}

fn elementwise_max(resources: impl Iterator<Item = Resources>) -> Resources {
    resources.fold(Resources::ZERO, |acc, r| acc.max(&r))
}

fn within_headroom(capacity: &Resources, headroom: &[Option<i64>], credit: &Resources) -> bool {
    ResourceName::ALL
        .into_iter()
        .all(|r| headroom[r as usize].is_none_or(|h| capacity.get(r) <= h + credit.get(r)))
}

fn min_values_met(
    types: &[Priced],
    all: &[Arc<InstanceType>],
    requirements: &Requirements,
) -> Result<(), String> {
    for (key, requirement) in requirements.iter() {
        let Some(min) = requirement.min_values else {
            continue;
        };
        let mut distinct: Vec<&str> = types
            .iter()
            .filter_map(|t| all[t.index].labels.get(key).map(String::as_str))
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < min {
            return Err(format!(
                "minValues {min} for {key} not met: only {} value(s) remain",
                distinct.len()
            ));
        }
    }
    Ok(())
}

/// How a round chooses among the NodeClaims it has planned when a pod could join several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Packing {
    /// The NodeClaim whose launch price grows least, a new one only when that is cheaper.
    #[default]
    CheapestGrowth,
    /// The first NodeClaim any of whose instance types has room (plain first-fit decreasing,
    /// as upstream packs; kept as the benchmark's baseline).
    FirstFit,
}

/// Runs one round.
pub fn solve(input: &SchedulingInput) -> SchedulingResult {
    solve_with(input, Packing::default())
}

/// Rounds up to this many pods are also packed first-fit, and the cheaper plan wins: the
/// greedy is a heuristic, small rounds are where it varies most, and there the second
/// packing costs well under a millisecond per hundred pods.
pub const FIRST_FIT_GUARD_MAX_PODS: usize = 500;

/// Larger rounds are packed first-fit too when they need few NodeClaims (first fit looks at
/// every planned NodeClaim per pod, so it is cheap then), within a bounded amount of work.
const FIRST_FIT_GUARD_MAX_CLAIMS: usize = 32;

/// Runs one round with the given packing strategy.
pub fn solve_with(input: &SchedulingInput, packing: Packing) -> SchedulingResult {
    let input = &*canonical(input);
    let unbounded = usize::MAX;
    let (mut result, _) = pack(input, packing, Order::Largest, unbounded);
    if packing != Packing::CheapestGrowth {
        return result;
    }
    let unconstrained = input.pods.iter().all(|p| {
        let ignored = input.preference_policy == PreferencePolicy::Ignore;
        p.pod_affinity.is_empty()
            && p.spread.iter().all(|s| s.schedule_anyway && ignored)
            && (p.preferred_pod_affinity.is_empty() || ignored)
    });
    if input.pods.len() <= BALANCED_GUARD_MAX_PODS || unconstrained {
        let (balanced, _) = pack(input, packing, Order::Balanced, unbounded);
        if better(&balanced, &result) {
            result = balanced;
        }
    }
    let budget = if input.pods.len() <= FIRST_FIT_GUARD_MAX_PODS {
        unbounded
    } else if result.new_claims.len() <= FIRST_FIT_GUARD_MAX_CLAIMS {
        2 * FIRST_FIT_GUARD_MAX_CLAIMS * input.pods.len()
    } else {
        return result;
    };
    match pack(input, Packing::FirstFit, Order::Largest, budget) {
        (first_fit, true) if better(&first_fit, &result) => first_fit,
        _ => result,
    }
}

/// Whether plan `a` beats plan `b`: it leaves no more pods unplaced and costs less.
fn better(a: &SchedulingResult, b: &SchedulingResult) -> bool {
    a.unschedulable.len() <= b.unschedulable.len()
        && a.new_capacity_cost() + PRICE_EPSILON < b.new_capacity_cost()
}

/// Rounds up to this many pods, and rounds without topology constraints, are also packed in
/// [`Order::Balanced`], and the cheaper plan wins: which order packs better depends on how
/// many pods a node holds, which constraints decide.
const BALANCED_GUARD_MAX_PODS: usize = 500;

/// The order pods are placed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Pods needing a node of their own, then by dominant share, largest first.
    Largest,
    /// As [`Order::Largest`], but CPU-heavy and memory-heavy pods interleaved so that what
    /// has been placed keeps the instance types' memory per vCPU: by size alone, a round of
    /// many small pods fills its first nodes with one shape and strands the other resource.
    Balanced,
}

/// One packing, and whether it completed: it stops early, with a partial result, once it has
/// looked at more than `budget` planned NodeClaims in all.
fn pack(
    input: &SchedulingInput,
    packing: Packing,
    order: Order,
    budget: usize,
) -> (SchedulingResult, bool) {
    let mut pools: Vec<usize> = (0..input.nodepools.len()).collect();
    pools.sort_by(|a, b| {
        let (a, b) = (&input.nodepools[*a], &input.nodepools[*b]);
        b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name))
    });
    let mut table = RequirementTable::default();
    let mut pool_states: Vec<PoolState> = input
        .nodepools
        .iter()
        .map(|p| pool_state(p, &input.daemonsets, &mut table))
        .collect();
    let mut existing_use: Vec<NodeUse> = input
        .existing
        .iter()
        .map(|n| NodeUse {
            requested: n.requested,
            host_ports: n.host_ports.clone(),
            attached: n.attached.clone(),
        })
        .collect();

    let order = match packing {
        Packing::CheapestGrowth => placement_order(input, order),
        Packing::FirstFit => first_fit_decreasing_order(input),
    };

    let mut result = SchedulingResult::default();
    let mut claims = Claims::new(&input.pods, typical_memory_per_core(input));
    let mut topology = Topology::new(
        &input.pods,
        &input.existing,
        input.preference_policy == PreferencePolicy::Respect,
    );
    let domain_keys = domain_keys(input);
    let mut node_domains = NodeDomains::default();
    let pool_domains = pool_domains(input, &pool_states, &domain_keys);
    // Per pod placed on a planned NodeClaim with its preferences or without some of them: the
    // constraints it was placed under, which later moves keep.
    let mut constrained_as: Vec<Option<Pod>> = vec![None; input.pods.len()];
    let mut work = 0;
    let soft = |taints: &[Taint]| taints.iter().any(|t| t.effect == "PreferNoSchedule");
    let soft_taints = input.nodepools.iter().any(|p| soft(&p.taints))
        || input.existing.iter().any(|n| soft(&n.taints));
    let any_min_values = input
        .nodepools
        .iter()
        .any(|p| p.requirements.iter().any(|(_, r)| r.min_values.is_some()));
    // Upstream's queue: a pod that fails goes to the back and is tried again while the round
    // makes progress, so a pod whose required pod affinity or spread others decide (a follower
    // ahead of its target) joins them once they are placed. `failed_at` holds, per pod, how
    // many pods had been placed when it last failed: meeting it again with none placed since
    // means a whole cycle made no progress.
    let pinned_keys = affinity_targets(input);
    let mut queue: VecDeque<usize> = order.into();
    let mut progress = 0usize;
    let mut failed_at: BTreeMap<usize, (usize, String)> = BTreeMap::new();
    'pods: while let Some(pod_index) = queue.pop_front() {
        if work > budget {
            return (result, false);
        }
        if failed_at
            .get(&pod_index)
            .is_some_and(|(when, _)| *when == progress)
        {
            queue.push_front(pod_index);
            break;
        }
        let pod = &input.pods[pod_index];
        let unplaceable = if !pod.unknown_resources.is_empty() {
            Some(format!(
                "requests resources no instance type provides: {}",
                pod.unknown_resources.join(", ")
            ))
        } else if let Some(blocked) = &pod.blocked {
            Some(blocked.clone())
        } else if !pod.unsupported.is_empty() {
            Some(format!(
                "uses constraints this scheduler does not model yet: {}",
                pod.unsupported.join(", ")
            ))
        } else {
            None
        };
        if let Some(reason) = unplaceable {
            result.unschedulable.push(Unschedulable {
                pod: pod.uid.clone(),
                reason,
            });
            continue;
        }
        let mut reasons = Vec::new();
        // The pod with its preferences as requirements first, then relaxed one at a time;
        // PreferNoSchedule taints are kept off until the very last attempt.
        let strict = Leniency {
            avoid_soft_taints: soft_taints,
            relax_min_values: false,
        };
        let mut attempts: Vec<(Cow<'_, Pod>, Leniency)> = relaxations(pod, input.preference_policy)
            .into_iter()
            .map(|a| (a, strict))
            .collect();
        if let Some((last, lenient)) = attempts.last().cloned() {
            if lenient.avoid_soft_taints {
                attempts.push((
                    last.clone(),
                    Leniency {
                        avoid_soft_taints: false,
                        ..lenient
                    },
                ));
            }
            if input.min_values_policy == MinValuesPolicy::BestEffort && any_min_values {
                attempts.push((
                    last,
                    Leniency {
                        avoid_soft_taints: false,
                        relax_min_values: true,
                    },
                ));
            }
        }
        let tolerated_by = |avoid_soft_taints: bool| -> Vec<bool> {
            input
                .nodepools
                .iter()
                .map(|p| {
                    untolerated_avoiding(&p.taints, &pod.tolerations, avoid_soft_taints).is_none()
                })
                .collect()
        };
        let (tolerated_avoiding, tolerated_all) = (tolerated_by(true), tolerated_by(false));
        for (attempt, leniency) in attempts {
            let tolerated = if leniency.avoid_soft_taints {
                &tolerated_avoiding
            } else {
                &tolerated_all
            };
            let pod: &Pod = &attempt;
            let base = pod.requirement_alternatives();
            let constraints: Vec<&TopologySpread> = pod.spread.iter().collect();
            let domain_level = |key: &str| key != labels::HOSTNAME;
            // Where the pod could go, and per spread the domains its policies count.
            let repelled = topology.repelled_domains(pod);
            let pinned = &pinned_keys[pod_index];
            let (reachable, counted) = if constraints.iter().any(|c| domain_level(&c.topology_key))
                || pod
                    .pod_affinity
                    .iter()
                    .any(|t| domain_level(&t.topology_key))
                || !repelled.is_empty()
                || !pinned.is_empty()
            {
                let creatable =
                    pool_universe(input, &pool_domains, &base, pod.needs_exotic(), tolerated);
                // A spread counts the domains of the pod's required constraints: a preferred
                // node affinity tried as a requirement narrows where this attempt may go, not
                // the domains whose minimum the skew is taken against (kube-scheduler counts
                // nodes by the required node affinity only).
                let required = &input.pods[pod_index];
                let counted_creatable =
                    if std::ptr::eq(pod, required) || pod.node_selector == required.node_selector {
                        creatable.clone()
                    } else {
                        pool_universe(
                            input,
                            &pool_domains,
                            &required.requirement_alternatives(),
                            pod.needs_exotic(),
                            tolerated,
                        )
                    };
                // Volumes decide where the pod may go, not which nodes a spread counts.
                let node_affinity = required.node_affinity_alternatives();
                let mut with_nodes = |creatable: &Domains,
                                      alternatives: &[Requirements],
                                      policy: NodePolicy| {
                    let mut domains = creatable.clone();
                    let of_nodes = node_domains.of(input, &domain_keys, alternatives, pod, policy);
                    for (key, values) in of_nodes {
                        domains
                            .entry(key.clone())
                            .or_default()
                            .extend(values.iter().cloned());
                    }
                    domains
                };
                let reachable = with_nodes(
                    &creatable,
                    &base,
                    NodePolicy {
                        honor_affinity: true,
                        honor_taints: true,
                    },
                );
                let counted: Vec<Domains> = constraints
                    .iter()
                    .map(|c| {
                        if domain_level(&c.topology_key) {
                            with_nodes(
                                &counted_creatable,
                                &node_affinity,
                                NodePolicy {
                                    honor_affinity: !c.ignore_node_affinity,
                                    honor_taints: c.honor_node_taints,
                                },
                            )
                        } else {
                            Domains::new()
                        }
                    })
                    .collect();
                (reachable, counted)
            } else {
                (Domains::new(), Vec::new())
            };
            let choices = domain_choices(
                &topology,
                &constraints,
                pod,
                &base,
                &Reach {
                    reachable: &reachable,
                    counted: &counted,
                    repelled: &repelled,
                    pinned,
                },
            );
            if choices.is_empty() {
                let keys: BTreeSet<&str> = constraints
                    .iter()
                    .map(|c| c.topology_key.as_str())
                    .chain(pod.pod_affinity.iter().map(|t| t.topology_key.as_str()))
                    .chain(repelled.keys().copied())
                    .filter(|k| *k != labels::HOSTNAME)
                    .collect();
                reasons = vec![format!(
                    "no {} satisfies the pod's requirements, topology spread (within maxSkew) and pod (anti-)affinity together (its own and that of pods already placed)",
                    keys.into_iter().collect::<Vec<_>>().join(" and ")
                )];
                continue;
            }
            let hostname = HostnameRules::new(pod, &constraints, &topology);
            for choice in choices {
                let alternatives: Vec<Requirements> = base
                    .iter()
                    .map(|alt| {
                        let mut narrowed = alt.clone();
                        for (key, domain) in &choice {
                            narrowed.add(key, Requirement::is_in([domain.clone()]));
                        }
                        narrowed
                    })
                    .collect();
                let alternative_ids: Vec<usize> =
                    alternatives.iter().map(|alt| table.intern(alt)).collect();
                let placed = place(
                    input,
                    packing,
                    leniency,
                    &mut work,
                    &mut table,
                    pod_index,
                    &alternatives,
                    &alternative_ids,
                    &hostname,
                    &topology,
                    tolerated,
                    &pools,
                    &mut existing_use,
                    &mut claims,
                    &mut pool_states,
                );
                match placed {
                    Ok(Placed::Existing(i)) => {
                        let node = &input.existing[i];
                        // Counted by its labels; only its required anti-affinity repels others.
                        topology.record(&input.pods[pod_index], |key| {
                            topology::existing_domain(node, key)
                        });
                        result.bindings.push(Binding {
                            pod: pod.uid.clone(),
                            node: node.name.clone(),
                        });
                        progress += 1;
                        continue 'pods;
                    }
                    Ok(Placed::Claim(i)) => {
                        let requirements = table.get(claims.all[i].requirements);
                        topology.record(&input.pods[pod_index], |key| {
                            topology::claim_domain(requirements, i, key)
                        });
                        if let Cow::Owned(placed_as) = attempt {
                            constrained_as[pod_index] = Some(placed_as);
                        }
                        progress += 1;
                        continue 'pods;
                    }
                    Err(why) => reasons = why,
                }
            }
        }
        let reason = if reasons.is_empty() {
            "no NodePool is ready to create nodes".to_owned()
        } else {
            reasons.join("; ")
        };
        if others_decide(pod) {
            failed_at.insert(pod_index, (progress, reason));
            queue.push_back(pod_index);
        } else {
            result.unschedulable.push(Unschedulable {
                pod: pod.uid.clone(),
                reason,
            });
        }
    }
    // What is left failed a whole cycle without progress.
    for pod_index in queue {
        let reason = failed_at
            .remove(&pod_index)
            .map(|(_, reason)| reason)
            .unwrap_or_default();
        result.unschedulable.push(Unschedulable {
            pod: input.pods[pod_index].uid.clone(),
            reason,
        });
    }

    if packing == Packing::CheapestGrowth {
        shrink_claims(
            input,
            &constrained_as,
            &mut table,
            &mut pool_states,
            &mut claims,
            &mut topology,
        );
    }
    let mut names = SharedNames::default();
    result.new_claims = claims
        .all
        .into_iter()
        .filter(|claim| !claim.pods.is_empty())
        .map(|claim| {
            let pool = &input.nodepools[claim.pool];
            // `types` is already cheapest first (ties by catalog position).
            let options: Vec<InstanceTypeOption> = claim
                .types
                .iter()
                .map(|t| {
                    let it = &pool.instance_types[t.index];
                    let (name, zones) = names.of(claim.pool, t.index, it);
                    InstanceTypeOption {
                        name: name.clone(),
                        price: t.price,
                        zone: zones[t.offering].clone(),
                        capacity_type: it.offerings[t.offering].capacity_type,
                    }
                })
                .collect();
            PlannedNodeClaim {
                nodepool: pool.name.clone(),
                requirements: table.get(claim.requirements).clone(),
                instance_types: options,
                pods: claim
                    .pods
                    .iter()
                    .map(|p| input.pods[*p].uid.clone())
                    .collect(),
                requests: claim.requests,
                min_values_relaxed: claim.min_values_relaxed,
            }
        })
        .collect();
    (result, true)
}

/// Instance type and zone names shared by the options of every planned NodeClaim, looked up
/// by position (a round lists millions of options on a full catalog; hashing each name was a
/// third of such a round).
#[derive(Default)]
struct SharedNames {
    /// By NodePool and catalog position: the type's name and each offering's zone.
    types: Vec<Vec<Option<TypeNames>>>,
    zones: HashMap<String, Arc<str>>,
}

/// An instance type's name and the zones of its offerings, in offering order.
type TypeNames = (Arc<str>, Vec<Arc<str>>);

impl SharedNames {
    fn of(&mut self, pool: usize, index: usize, it: &InstanceType) -> &TypeNames {
        if self.types.len() <= pool {
            self.types.resize_with(pool + 1, Vec::new);
        }
        let of_pool = &mut self.types[pool];
        if of_pool.len() <= index {
            of_pool.resize_with(index + 1, || None);
        }
        let zones = &mut self.zones;
        of_pool[index].get_or_insert_with(|| {
            let offering_zones = it
                .offerings
                .iter()
                .map(|o| {
                    zones
                        .entry(o.zone.clone())
                        .or_insert_with(|| o.zone.as_str().into())
                        .clone()
                })
                .collect();
            (it.name.as_str().into(), offering_zones)
        })
    }
}

/// Capacity gains below this count as this much (no division by zero).
const MIN_GAIN: f64 = 1e-3;

/// How many copies of `pod` fit in `room`.
fn copies_fitting(pod: &Resources, room: &Resources) -> i64 {
    ResourceName::ALL
        .into_iter()
        .filter(|r| pod.get(*r) > 0)
        .map(|r| room.get(r).max(0) / pod.get(r))
        .min()
        .unwrap_or(1)
}

/// Claims priced per pod when it must grow one.
const GROWTH_CANDIDATES: usize = 32;

/// The order pods are placed in: pods that need a node of their own first (they decide how
/// many nodes there are, and later pods fill them), then by dominant share (CPU or memory,
/// whichever is the larger fraction of a typical instance type), largest first, so pods heavy
/// in either resource are placed while there is still room to balance them. Deterministic
/// whatever the input order.
fn placement_order(input: &SchedulingInput, order: Order) -> Vec<usize> {
    let own_node = |p: &Pod| {
        p.pod_affinity.iter().any(|t| {
            t.anti
                && t.topology_key == labels::HOSTNAME
                && CountKey::affinity(t, &p.namespace).matches(&p.namespace, &p.labels)
        })
    };
    let bytes_per_core = typical_memory_per_core(input);
    let dominant = |p: &Pod| {
        let cpu = p.requests.get(ResourceName::Cpu) as f64 / 1000.0;
        let memory = p.requests.get(ResourceName::Memory) as f64 / bytes_per_core;
        cpu.max(memory)
    };
    let mut keyed: Vec<(bool, f64, usize)> = input
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (own_node(p), dominant(p), i))
        .collect();
    keyed.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then_with(|| larger_first(&input.pods[a.2], &input.pods[b.2]))
    });
    if order == Order::Largest {
        return keyed.into_iter().map(|(_, _, i)| i).collect();
    }
    let own_nodes = keyed.iter().take_while(|k| k.0).count();
    let mut order: Vec<usize> = keyed[..own_nodes].iter().map(|k| k.2).collect();
    // Of the rest, the next pod is the largest of whichever shape brings the placed pods'
    // CPU and memory (at the typical memory per vCPU) closer to even.
    let excess = |p: &Pod| {
        p.requests.get(ResourceName::Cpu) as f64 / 1000.0
            - p.requests.get(ResourceName::Memory) as f64 / bytes_per_core
    };
    let (cpu_heavy, memory_heavy): (Vec<usize>, Vec<usize>) = keyed[own_nodes..]
        .iter()
        .map(|k| k.2)
        .partition(|i| excess(&input.pods[*i]) > 0.0);
    let (mut cpu_next, mut memory_next) =
        (cpu_heavy.iter().peekable(), memory_heavy.iter().peekable());
    let mut balance = 0.0;
    loop {
        let next = match (cpu_next.peek(), memory_next.peek()) {
            (Some(_), Some(_)) if balance > 0.0 => memory_next.next(),
            (Some(_), _) => cpu_next.next(),
            (None, Some(_)) => memory_next.next(),
            (None, None) => break,
        };
        if let Some(&i) = next {
            balance += excess(&input.pods[i]);
            order.push(i);
        }
    }
    order
}

/// Upstream's order: CPU, then memory, largest first.
fn first_fit_decreasing_order(input: &SchedulingInput) -> Vec<usize> {
    let mut order: Vec<usize> = (0..input.pods.len()).collect();
    order.sort_by(|a, b| larger_first(&input.pods[*a], &input.pods[*b]));
    order
}

/// CPU, then memory, largest first; then by UID, so the order never depends on the input's.
fn larger_first(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    let cpu = |p: &Pod| p.requests.get(ResourceName::Cpu);
    let memory = |p: &Pod| p.requests.get(ResourceName::Memory);
    cpu(b)
        .cmp(&cpu(a))
        .then_with(|| memory(b).cmp(&memory(a)))
        .then_with(|| a.uid.cmp(&b.uid))
}

/// The median memory per vCPU of the round's instance types (4 GiB when there are none).
fn typical_memory_per_core(input: &SchedulingInput) -> f64 {
    let mut ratios: Vec<f64> = input
        .nodepools
        .iter()
        .flat_map(|p| &p.instance_types)
        .filter(|it| it.capacity.get(ResourceName::Cpu) > 0)
        .map(|it| {
            it.capacity.get(ResourceName::Memory) as f64
                / (it.capacity.get(ResourceName::Cpu) as f64 / 1000.0)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
        .get(ratios.len() / 2)
        .copied()
        .unwrap_or(4.0 * (1u64 << 30) as f64)
}

/// The constraint sets a pod is tried under, strictest first. With preferences respected:
/// every preferred pod affinity and anti-affinity term as required, the heaviest preferred
/// node affinity term as required, and every `ScheduleAnyway` spread kept; each following
/// set relaxes one more, in upstream's order (preferred pod affinity, then preferred pod
/// anti-affinity, heaviest first; then preferred node affinity, the next heaviest taking
/// over; then `ScheduleAnyway` spreads). With preferences ignored: the pod without them.
fn relaxations(pod: &Pod, policy: PreferencePolicy) -> Vec<Cow<'_, Pod>> {
    if !pod.has_preferences() {
        return vec![Cow::Borrowed(pod)];
    }
    let bare = pod.without_preferences();
    if policy == PreferencePolicy::Ignore {
        return vec![Cow::Owned(bare)];
    }
    let heaviest_first = |anti: bool| {
        let mut terms: Vec<&(i32, crate::model::pod::PodAffinityTerm)> = pod
            .preferred_pod_affinity
            .iter()
            .filter(|(_, t)| t.anti == anti)
            .collect();
        terms.sort_by_key(|(weight, _)| std::cmp::Reverse(*weight));
        terms
    };
    let affinity = heaviest_first(false);
    let anti = heaviest_first(true);
    let mut node: Vec<&(i32, Requirements)> = pod.preferred_node_affinity.iter().collect();
    node.sort_by_key(|(weight, _)| std::cmp::Reverse(*weight));
    let soft: Vec<&TopologySpread> = pod.spread.iter().filter(|s| s.schedule_anyway).collect();
    // How many of each kind (affinity, anti-affinity, node affinity, soft spreads) are
    // relaxed away, from the front of each list.
    let build = |dropped: &[usize; 4]| {
        let mut p = bare.clone();
        p.pod_affinity.extend(
            affinity[dropped[0]..]
                .iter()
                .chain(&anti[dropped[1]..])
                .map(|(_, t)| t.clone()),
        );
        if let Some((_, preferred)) = node.get(dropped[2]) {
            p.node_selector.intersect_with(preferred);
        }
        p.spread
            .extend(soft[dropped[3]..].iter().map(|s| (*s).clone()));
        Cow::Owned(p)
    };
    let lengths = [affinity.len(), anti.len(), node.len(), soft.len()];
    let mut dropped = [0; 4];
    let mut out = vec![build(&dropped)];
    for kind in 0..4 {
        while dropped[kind] < lengths[kind] {
            dropped[kind] += 1;
            out.push(build(&dropped));
        }
    }
    out
}

/// Whether pods placed later in a round can make a pod that failed placeable: only required
/// pod affinity (a target arriving) and required spreads (the emptiest domain filling up)
/// depend on others that way; resources, taints, anti-affinity and limits only get tighter.
fn others_decide(pod: &Pod) -> bool {
    pod.pod_affinity.iter().any(|t| !t.anti) || pod.spread.iter().any(|s| !s.schedule_anyway)
}

/// Per pod, the keys (other than hostname) of the required pod-affinity terms of the round's
/// pods that select it: it is pinned to one domain of each, since a claim left open to
/// several zones gives its followers no zone to follow it to.
fn affinity_targets(input: &SchedulingInput) -> Vec<Vec<String>> {
    let mut terms: Vec<CountKey> = Vec::new();
    for pod in &input.pods {
        for term in &pod.pod_affinity {
            if term.anti || term.topology_key == labels::HOSTNAME {
                continue;
            }
            let key = CountKey::affinity(term, &pod.namespace);
            if !terms.contains(&key) {
                terms.push(key);
            }
        }
    }
    input
        .pods
        .iter()
        .map(|pod| {
            let mut keys: Vec<String> = terms
                .iter()
                .filter(|k| k.matches(&pod.namespace, &pod.labels))
                .map(|k| k.topology_key.clone())
                .collect();
            keys.sort();
            keys.dedup();
            keys
        })
        .collect()
}

/// Where a pod went.
enum Placed {
    Existing(usize),
    Claim(usize),
}

/// The domains an attempt to place a pod works with.
struct Reach<'a> {
    /// The domains the pod could go to.
    reachable: &'a Domains,
    /// Per spread constraint, the domains its policies count.
    counted: &'a [Domains],
    /// Per key, the domains other pods' anti-affinity keeps it out of.
    repelled: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
    /// Keys the pod is pinned to one domain of (others' affinity follows it).
    pinned: &'a [String],
}

/// The combinations of domains (zone, capacity type or any other key but hostname) a pod's
/// spread constraints and pod (anti-)affinity allow within `reach`, emptiest first. One
/// empty combination when it has no such constraint; none when nothing is allowed.
fn domain_choices<'a>(
    topology: &Topology,
    constraints: &[&'a TopologySpread],
    pod: &'a Pod,
    base: &[Requirements],
    reach: &Reach<'a>,
) -> Vec<Vec<(String, String)>> {
    let Reach {
        reachable,
        counted,
        repelled,
        pinned,
    } = *reach;
    let mut per_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut narrow = |key: &'a str, allowed: Vec<String>| {
        per_key
            .entry(key)
            .and_modify(|existing| existing.retain(|d| allowed.contains(d)))
            .or_insert(allowed);
    };
    let no_domains = BTreeSet::new();
    let reachable_for = |key: &str| reachable.get(key).unwrap_or(&no_domains);
    for (c, universe) in constraints.iter().zip(counted) {
        if c.topology_key == labels::HOSTNAME {
            continue;
        }
        let key = c.topology_key.as_str();
        narrow(
            key,
            topology.allowed_domains(
                c,
                pod,
                universe.get(key).unwrap_or(&no_domains),
                reachable_for(key),
            ),
        );
    }
    for term in pod
        .pod_affinity
        .iter()
        .filter(|t| t.topology_key != labels::HOSTNAME)
    {
        let key = term.topology_key.as_str();
        let count_key = CountKey::affinity(term, &pod.namespace);
        let eligible: Vec<String> = reachable_for(key)
            .iter()
            .filter(|d| base.iter().any(|alt| alt.get(key).is_none_or(|r| r.has(d))))
            .cloned()
            .collect();
        let occupied = topology.occupied(&count_key);
        let allowed: Vec<String> = if term.anti {
            eligible
                .into_iter()
                .filter(|d| !occupied.contains(d))
                .collect()
        } else if occupied.is_empty() && count_key.matches(&pod.namespace, &pod.labels) {
            // The first of a group of pods with affinity to each other may go anywhere.
            eligible
        } else {
            occupied
                .into_iter()
                .filter(|d| eligible.contains(d))
                .collect()
        };
        narrow(key, allowed);
    }
    // A pod others' affinity refers to goes to one domain of each such key, so they know
    // where it is and can follow it there.
    for key in pinned {
        let eligible: Vec<String> = reachable_for(key)
            .iter()
            .filter(|d| base.iter().any(|alt| alt.get(key).is_none_or(|r| r.has(d))))
            .cloned()
            .collect();
        // Where the key has no domains the pod can reach, its followers cannot follow it
        // anyway; that must not keep the pod itself from a node.
        if !eligible.is_empty() {
            narrow(key, eligible);
        }
    }
    for (&key, repelled) in repelled {
        let allowed: Vec<String> = reachable_for(key)
            .iter()
            .filter(|d| !repelled.contains(d.as_str()))
            .cloned()
            .collect();
        narrow(key, allowed);
    }
    let mut choices: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (key, domains) in per_key {
        choices = choices
            .into_iter()
            .flat_map(|choice| {
                domains.iter().map(move |d| {
                    let mut c = choice.clone();
                    c.push((key.to_owned(), d.clone()));
                    c
                })
            })
            .collect();
    }
    choices
}

/// Per-node rules of a pod: hostname spread, and hostname pod affinity and anti-affinity,
/// with their count groups resolved once.
struct HostnameRules {
    spread: Vec<(Option<usize>, i64)>,
    anti: Vec<Option<usize>>,
    affinity: Vec<Option<usize>>,
    /// The pod matches its own hostname affinity and no matching pod exists yet.
    first_of_group: bool,
}

impl HostnameRules {
    fn new(pod: &Pod, spreads: &[&TopologySpread], topology: &Topology) -> Self {
        let hostname_terms = || {
            pod.pod_affinity
                .iter()
                .filter(|t| t.topology_key == labels::HOSTNAME)
        };
        let affinity_keys: Vec<CountKey> = hostname_terms()
            .filter(|t| !t.anti)
            .map(|t| CountKey::affinity(t, &pod.namespace))
            .collect();
        HostnameRules {
            spread: spreads
                .iter()
                .filter(|c| c.topology_key == labels::HOSTNAME)
                .map(|c| {
                    (
                        topology.group(&CountKey::spread(c, &pod.namespace)),
                        c.max_skew,
                    )
                })
                .collect(),
            anti: hostname_terms()
                .filter(|t| t.anti)
                .map(|t| topology.group(&CountKey::affinity(t, &pod.namespace)))
                .collect(),
            affinity: affinity_keys.iter().map(|k| topology.group(k)).collect(),
            first_of_group: affinity_keys
                .iter()
                .all(|k| !topology.any(k) && k.matches(&pod.namespace, &pod.labels)),
        }
    }

    /// No per-node rules at all.
    fn is_empty(&self) -> bool {
        self.spread.is_empty() && self.anti.is_empty() && self.affinity.is_empty()
    }

    /// Whether the pod may join the node (or planned NodeClaim) `domain`.
    fn allows(&self, topology: &Topology, domain: &Domain) -> bool {
        self.spread
            .iter()
            .all(|(g, max_skew)| topology.count_in(*g, domain) < *max_skew)
            && self.anti.iter().all(|g| topology.count_in(*g, domain) == 0)
            && (self.first_of_group
                || self
                    .affinity
                    .iter()
                    .all(|g| topology.count_in(*g, domain) > 0))
    }

    /// Whether no planned NodeClaim can take the pod, because each of the `claims` holds a
    /// pod its anti-affinity (or a spread of maxSkew 1) excludes; saves scanning them.
    fn excludes_every_claim(&self, topology: &Topology, claims: usize) -> bool {
        claims > 0
            && self
                .anti
                .iter()
                .copied()
                .chain(
                    self.spread
                        .iter()
                        .filter(|(_, max_skew)| *max_skew <= 1)
                        .map(|(g, _)| *g),
                )
                .any(|g| topology.occupied_claims(g) >= claims)
    }

    /// Whether a new NodeClaim may take it (an empty node has no pod to be near).
    fn allows_new_node(&self) -> bool {
        self.affinity.is_empty() || self.first_of_group
    }
}

/// How far one attempt to place a pod bends the NodePools' rules.
#[derive(Debug, Clone, Copy)]
struct Leniency {
    /// Keep off nodes and pools with PreferNoSchedule taints the pod does not tolerate.
    avoid_soft_taints: bool,
    /// Let a NodeClaim keep fewer distinct values than minValues ([`MinValuesPolicy`]).
    relax_min_values: bool,
}

/// What the round has put on an existing node so far, on top of what was there.
struct NodeUse {
    requested: Resources,
    host_ports: Vec<HostPort>,
    attached: Vec<VolumeAttachment>,
}

/// Whether a pod on the planned NodeClaim binds a host port `pod` needs.
fn host_ports_taken(input: &SchedulingInput, claim: &ClaimState, pod: &Pod) -> bool {
    !pod.host_ports.is_empty()
        && claim
            .pods
            .iter()
            .any(|p| ports_conflict(&input.pods[*p].host_ports, &pod.host_ports))
}

/// Claims a pod could join for free that are compared before it joins the best of them.
const FREE_CANDIDATES: usize = 8;

/// Keeps free joins' scores (at most 2 above it) below any growth's (positive).
const FREE_SCORE_OFFSET: f64 = 3.0;

/// Tries existing nodes, then NodeClaims planned this round, then a new NodeClaim per
/// NodePool in weight order. Returns one reason per NodePool when nothing fits.
///
/// Among planned NodeClaims, [`Packing::CheapestGrowth`] takes the one whose launch price
/// grows least (the first that does not grow at all), and opens a new NodeClaim only when
/// that costs less than the growth; [`Packing::FirstFit`] takes the first that can grow.
#[allow(clippy::too_many_arguments)]
fn place(
    input: &SchedulingInput,
    packing: Packing,
    leniency: Leniency,
    work: &mut usize,
    table: &mut RequirementTable,
    pod_index: usize,
    alternatives: &[Requirements],
    alternative_ids: &[usize],
    hostname: &HostnameRules,
    topology: &Topology,
    tolerated: &[bool],
    pools: &[usize],
    existing_use: &mut [NodeUse],
    claims: &mut Claims,
    pool_states: &mut [PoolState],
) -> Result<Placed, Vec<String>> {
    let pod = &input.pods[pod_index];
    let room_on = |domain: &Domain| {
        (hostname.is_empty() || hostname.allows(topology, domain)) && !topology.repels(domain, pod)
    };
    // Naming a node's hostname domain allocates; skip it when nothing could object.
    let check_nodes = !hostname.is_empty() || topology.repels_on_nodes();
    for (i, node) in input.existing.iter().enumerate() {
        // Room first: it is the cheapest check and rules out the most (full) nodes.
        let used = &mut existing_use[i];
        let after = used.requested.add(&pod.requests);
        if !after.fits_in(&node.allocatable)
            || untolerated_avoiding(&node.taints, &pod.tolerations, leniency.avoid_soft_taints)
                .is_some()
            || !alternatives
                .iter()
                .any(|alt| alt.matches_labels(&node.labels).is_ok())
            || (check_nodes
                && !topology::existing_domain(node, labels::HOSTNAME).is_some_and(|d| room_on(&d)))
        {
            continue;
        }
        if !ports_conflict(&used.host_ports, &pod.host_ports)
            && attachments_fit(&node.attach_limits, &used.attached, &pod.volume_attachments)
        {
            used.requested = after;
            used.host_ports.extend(pod.host_ports.iter().cloned());
            for volume in &pod.volume_attachments {
                if !used.attached.contains(volume) {
                    used.attached.push(volume.clone());
                }
            }
            return Ok(Placed::Existing(i));
        }
    }
    // (claim, alternative, added $/h, $/h per unit of capacity it adds)
    let mut best: Option<(usize, usize, f64, f64)> = None;
    // `None` when cheap checks rule the claim out, else whether to take it: first fit takes
    // any that has room, cheapest growth any it joins for free.
    let mut consider = |index: usize, claim: &ClaimState| {
        *work += 1;
        if !tolerated[claim.pool]
            || !claim
                .requests
                .add(&pod.requests)
                .fits_in(&claim.max_allocatable)
            || !room_on(&Domain::Claim(index))
            || host_ports_taken(input, claim, pod)
        {
            return None;
        }
        let state = &pool_states[claim.pool];
        let Some((alternative, grown)) = claim_growth(
            input,
            table,
            state,
            claim,
            pod,
            alternative_ids,
            leniency.relax_min_values,
        ) else {
            return Some(false);
        };
        let current = claim.types[0];
        let growth = grown.price - current.price;
        let score = if growth <= 0.0 {
            // Joining for free: the claim left with the least room, by the squared sum of
            // its spare shares (CPU and memory), which also favours claims whose spare room
            // has the pod's shape, so neither resource is stranded.
            let allocatable = &state.allocatable[grown.index];
            let after = claim.requests.add(&pod.requests);
            let share = |r: ResourceName| {
                let total = allocatable.get(r).max(1) as f64;
                (total - after.get(r) as f64) / total
            };
            let left = share(ResourceName::Cpu).powi(2) + share(ResourceName::Memory).powi(2);
            growth + left - FREE_SCORE_OFFSET
        } else {
            let (before, after) = (
                &state.allocatable[current.index],
                &state.allocatable[grown.index],
            );
            growth / claims.gained(pod, &claim.requests, before, after)
        };
        if best.is_none_or(|(_, _, _, s)| score < s) {
            best = Some((index, alternative, growth, score));
        }
        Some(packing == Packing::FirstFit || growth <= 0.0)
    };
    match packing {
        Packing::FirstFit => {
            for (index, claim) in claims.all.iter().enumerate() {
                if consider(index, claim) == Some(true) {
                    break;
                }
            }
        }
        Packing::CheapestGrowth => {
            // The tightest claim the pod joins without raising its price; failing that, the
            // cheapest growth among a bounded number of the others (tightest first, which
            // packed best), so a round stays near-linear in its pods.
            if !hostname.excludes_every_claim(topology, claims.all.len()) {
                let mut free = false;
                let mut free_seen = 0;
                for index in claims.with_room(&pod.requests) {
                    if consider(index, &claims.all[index]) == Some(true) {
                        free = true;
                        free_seen += 1;
                        if free_seen >= FREE_CANDIDATES {
                            break;
                        }
                    }
                }
                if !free {
                    // Claims with a little room first, then the most recent full ones.
                    let full = (0..claims.all.len())
                        .rev()
                        .filter(|i| claims.open_keys[*i].is_none());
                    let mut priced = 0;
                    for index in claims.without_room(&pod.requests).chain(full) {
                        if consider(index, &claims.all[index]).is_some() {
                            priced += 1;
                            if priced >= GROWTH_CANDIDATES {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    let mut reasons = Vec::new();
    let mut fresh: Option<(usize, ClaimState)> = None;
    let growth_is_free = best.is_some_and(|(_, _, g, _)| g <= 0.0 || packing == Packing::FirstFit);
    if !growth_is_free {
        if !hostname.allows_new_node() {
            reasons.push(
                "pod affinity: must share a node with a matching pod, and none has room".to_owned(),
            );
        } else {
            for &pool_index in pools {
                match new_claim(
                    input,
                    table,
                    &pool_states[pool_index],
                    pool_index,
                    pod_index,
                    alternative_ids,
                    tolerated[pool_index],
                    leniency.relax_min_values,
                ) {
                    Ok(claim) => {
                        fresh = Some((pool_index, claim));
                        break;
                    }
                    Err(reason) => reasons.push(format!(
                        "nodepool {:?}: {reason}",
                        input.nodepools[pool_index].name
                    )),
                }
            }
        }
    }
    // Growing a claim and opening one are compared by price per unit of capacity bought, as
    // the room either leaves is what later pods fill.
    let fresh_score = fresh.as_ref().map(|(pool, claim)| {
        let state = &pool_states[*pool];
        let usable = state.allocatable[claim.types[0].index].sub(&state.daemon);
        let gained = claims.gained(pod, &Resources::ZERO, &Resources::ZERO, &usable);
        claim.types[0].price / gained
    });
    match (best, fresh) {
        (Some((index, alternative, _, score)), _) if fresh_score.is_none_or(|f| score <= f) => {
            let claim = &mut claims.all[index];
            let state = &mut pool_states[claim.pool];
            add_to_claim(
                input,
                table,
                state,
                claim,
                pod_index,
                alternative_ids[alternative],
            );
            claims.reindex(index, &state.allocatable);
            Ok(Placed::Claim(index))
        }
        (_, Some((pool_index, claim))) => {
            let state = &mut pool_states[pool_index];
            for r in ResourceName::ALL {
                if let Some(h) = &mut state.headroom[r as usize] {
                    *h -= claim.reserved.get(r);
                }
            }
            if let Some(n) = &mut state.nodes_left {
                *n -= 1;
            }
            Ok(Placed::Claim(claims.push(claim, &state.allocatable)))
        }
        _ => Err(reasons),
    }
}

type Domains = BTreeMap<String, BTreeSet<String>>;

/// The topology keys (other than hostname, whose domains are nodes) that the round's pods
/// and the existing nodes' anti-affinity refer to.
fn domain_keys(input: &SchedulingInput) -> BTreeSet<String> {
    let pod_keys = input.pods.iter().flat_map(|p| {
        p.spread
            .iter()
            .map(|s| s.topology_key.as_str())
            .chain(p.pod_affinity.iter().map(|t| t.topology_key.as_str()))
            .chain(
                p.preferred_pod_affinity
                    .iter()
                    .map(|(_, t)| t.topology_key.as_str()),
            )
    });
    let node_keys = input
        .existing
        .iter()
        .flat_map(|n| n.anti_affinity.iter().map(|(_, t)| t.topology_key.as_str()));
    pod_keys
        .chain(node_keys)
        .filter(|k| *k != labels::HOSTNAME)
        .map(str::to_owned)
        .collect()
}

/// The domains of each key a NodePool's new nodes could have: with its ordinary instance
/// types, and with its exotic (GPU, accelerator, metal) ones too, which only pods needing
/// them may launch.
#[derive(Default)]
struct PoolDomains {
    ordinary: Domains,
    all: Domains,
}

/// Per NodePool, its [`PoolDomains`]. Zones and capacity types come from the offerings;
/// other keys from instance type labels, or the pool's own requirements where a type does
/// not carry the label (its template labels).
fn pool_domains(
    input: &SchedulingInput,
    pool_states: &[PoolState],
    keys: &BTreeSet<String>,
) -> Vec<PoolDomains> {
    input
        .nodepools
        .iter()
        .zip(pool_states)
        .map(|(pool, state)| {
            let mut out = PoolDomains::default();
            for i in &state.types {
                let it = &pool.instance_types[*i];
                for key in keys {
                    let mut values = BTreeSet::new();
                    if key == labels::ZONE || key == labels::CAPACITY_TYPE {
                        for o in it.offerings_for(&pool.requirements) {
                            values.insert(if key == labels::ZONE {
                                o.zone.clone()
                            } else {
                                o.capacity_type.as_str().to_owned()
                            });
                        }
                    } else if let Some(value) = it.labels.get(key) {
                        if pool.requirements.get(key).is_none_or(|r| r.has(value)) {
                            values.insert(value.clone());
                        }
                    } else if let Some(pinned) = pool.requirements.get(key).and_then(|r| r.values())
                    {
                        values.extend(pinned.iter().cloned());
                    }
                    if values.is_empty() {
                        continue;
                    }
                    if !state.exotic[*i] {
                        out.ordinary
                            .entry(key.clone())
                            .or_default()
                            .extend(values.iter().cloned());
                    }
                    out.all.entry(key.clone()).or_default().extend(values);
                }
            }
            out
        })
        .collect()
}

/// The domains of the NodePools a pod could have a node made in: taints `tolerated`,
/// requirements compatible with one of its `alternatives`, and only the values those accept.
/// A pool the pod cannot use adds no domain until one of its nodes exists (upstream counts
/// every pool's domains, so one tainted or unrelated pool in an extra zone holds every
/// zone-spread workload back).
fn pool_universe(
    input: &SchedulingInput,
    pool_domains: &[PoolDomains],
    alternatives: &[Requirements],
    exotic_ok: bool,
    tolerated: &[bool],
) -> Domains {
    let mut out = Domains::new();
    for (i, pool) in input.nodepools.iter().enumerate() {
        if !tolerated[i]
            || !alternatives
                .iter()
                .any(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
        {
            continue;
        }
        let domains = if exotic_ok {
            &pool_domains[i].all
        } else {
            &pool_domains[i].ordinary
        };
        for (key, values) in domains {
            let accepted = values.iter().filter(|v| {
                alternatives
                    .iter()
                    .any(|alt| alt.get(key).is_none_or(|r| r.has(v)))
            });
            out.entry(key.clone())
                .or_default()
                .extend(accepted.cloned());
        }
    }
    out
}

/// Which existing nodes count towards a spread constraint, as kube-scheduler decides it.
#[derive(Clone, Copy)]
struct NodePolicy {
    /// Only nodes the pod's node selector and affinity accept (nodeAffinityPolicy Honor).
    honor_affinity: bool,
    /// Only nodes whose taints the pod tolerates (nodeTaintsPolicy Honor).
    honor_taints: bool,
}

/// The domains of the existing nodes a policy counts, remembered per pod shape (node
/// requirements, and tolerations where they matter): the pods of one workload ask alike, and
/// scanning every node for each would make a round quadratic.
#[derive(Default)]
struct NodeDomains {
    known: HashMap<NodeDomainsKey, Domains>,
    none: Domains,
}

/// Requirement alternatives, whether node affinity filters, and the tolerations when taints do.
type NodeDomainsKey = (
    Vec<Requirements>,
    bool,
    Option<Vec<crate::model::Toleration>>,
);

impl NodeDomains {
    fn of(
        &mut self,
        input: &SchedulingInput,
        keys: &BTreeSet<String>,
        alternatives: &[Requirements],
        pod: &Pod,
        policy: NodePolicy,
    ) -> &Domains {
        if input.existing.is_empty() {
            return &self.none;
        }
        let key: NodeDomainsKey = (
            if policy.honor_affinity {
                alternatives.to_vec()
            } else {
                Vec::new()
            },
            policy.honor_affinity,
            policy.honor_taints.then(|| pod.tolerations.clone()),
        );
        self.known.entry(key).or_insert_with(|| {
            let mut out = Domains::new();
            add_node_domains(&mut out, input, keys, alternatives, pod, policy);
            out
        })
    }
}

/// Adds the domains of the existing nodes `policy` counts.
fn add_node_domains(
    out: &mut Domains,
    input: &SchedulingInput,
    keys: &BTreeSet<String>,
    alternatives: &[Requirements],
    pod: &Pod,
    policy: NodePolicy,
) {
    for node in &input.existing {
        if (policy.honor_taints && untolerated(&node.taints, &pod.tolerations).is_some())
            || (policy.honor_affinity
                && !alternatives
                    .iter()
                    .any(|alt| alt.matches_labels(&node.labels).is_ok()))
        {
            continue;
        }
        for key in keys {
            if let Some(v) = node.labels.get(key) {
                out.entry(key.clone()).or_default().insert(v.clone());
            }
        }
    }
}

fn pool_state(
    pool: &NodePoolTemplate,
    daemonsets: &[Pod],
    table: &mut RequirementTable,
) -> PoolState {
    let types = pool
        .instance_types
        .iter()
        .enumerate()
        .filter(|(_, it)| {
            it.requirements.compatible(&pool.requirements).is_ok()
                && it.cheapest_offering(&pool.requirements).is_some()
        })
        .map(|(i, _)| i)
        .collect();
    let daemon = daemonsets
        .iter()
        .filter(|ds| {
            untolerated(&pool.taints, &ds.tolerations).is_none()
                && ds
                    .requirement_alternatives()
                    .iter()
                    .any(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
        })
        .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests));
    let mut headroom = [None; crate::model::resources::RESOURCE_COUNT];
    for (r, limit) in &pool.limits.resources {
        headroom[*r as usize] = Some(limit - pool.usage.get(*r));
    }
    PoolState {
        types,
        allocatable: pool
            .instance_types
            .iter()
            .map(|it| it.allocatable())
            .collect(),
        exotic: pool
            .instance_types
            .iter()
            .map(|it| it.is_exotic())
            .collect(),
        requirements: table.intern(&pool.requirements),
        daemon,
        headroom,
        nodes_left: pool.limits.nodes.map(|n| n - pool.node_count),
    }
}

/// An instance type a claim may launch as, priced under the claim's requirements.
#[derive(Debug, Clone, Copy)]
struct Priced {
    /// Position in the NodePool's catalog.
    index: usize,
    /// USD/hour of its cheapest allowed offering.
    price: f64,
    /// Position of that offering in the type's offerings.
    offering: usize,
}

/// Instance types with their prices, cheapest first (ties by catalog position).
type PricedTypes = Rc<[Priced]>;

/// Requirement sets seen this round, numbered, with their pairwise merges and the instance
/// types each allows per NodePool (cheapest first), each computed once: planned NodeClaims
/// and pods share few distinct sets, and re-deriving them per candidate claim dominated.
#[derive(Default)]
struct RequirementTable {
    sets: Vec<Requirements>,
    ids: HashMap<Requirements, usize>,
    /// `(a, b)` → the id of `a ∩ b`, `None` when they conflict (`b` against template `a`).
    merges: HashMap<(usize, usize), Option<usize>>,
    /// `(pool, set)` → the pool's launchable types compatible with the set, with the price of
    /// their cheapest allowed offering, cheapest first.
    priced: HashMap<(usize, usize), PricedTypes>,
}

impl RequirementTable {
    fn intern(&mut self, requirements: &Requirements) -> usize {
        if let Some(id) = self.ids.get(requirements) {
            return *id;
        }
        self.sets.push(requirements.clone());
        self.ids.insert(requirements.clone(), self.sets.len() - 1);
        self.sets.len() - 1
    }

    fn get(&self, id: usize) -> &Requirements {
        &self.sets[id]
    }

    /// A claim's requirements (`current`) narrowed by a pod's (`alternative`).
    fn merge(&mut self, current: usize, alternative: usize) -> Option<usize> {
        if let Some(merged) = self.merges.get(&(current, alternative)) {
            return *merged;
        }
        let (mine, theirs) = (&self.sets[current], &self.sets[alternative]);
        let merged = if mine.implies(theirs) {
            Some(current)
        } else if theirs.compatible_with_template(mine).is_err() {
            None
        } else {
            let mut merged = mine.clone();
            merged.intersect_with(theirs);
            Some(self.intern(&merged))
        };
        self.merges.insert((current, alternative), merged);
        merged
    }

    fn priced_types(
        &mut self,
        pool: &NodePoolTemplate,
        pool_index: usize,
        state: &PoolState,
        set: usize,
    ) -> PricedTypes {
        if let Some(types) = self.priced.get(&(pool_index, set)) {
            return types.clone();
        }
        let requirements = &self.sets[set];
        let mut priced: Vec<Priced> = state
            .types
            .iter()
            .filter_map(|&index| {
                let it = &pool.instance_types[index];
                if it.requirements.compatible(requirements).is_err() {
                    return None;
                }
                let cheapest = it.cheapest_offering(requirements)?;
                let offering = it
                    .offerings
                    .iter()
                    .position(|o| std::ptr::eq(o, cheapest))?;
                Some(Priced {
                    index,
                    price: cheapest.price,
                    offering,
                })
            })
            .collect();
        priced.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.index.cmp(&b.index)));
        let priced: PricedTypes = priced.into();
        self.priced.insert((pool_index, set), priced.clone());
        priced
    }
}

/// The types of `priced` a claim may launch as: with room for `requests` within the pool's
/// limit headroom (crediting what the claim reserves already), exotic ones only if allowed.
fn fitting_types(
    pool: &NodePoolTemplate,
    state: &PoolState,
    priced: &[Priced],
    exotic_ok: bool,
    requests: &Resources,
    credit: &Resources,
) -> Vec<Priced> {
    priced
        .iter()
        .filter(|t| {
            (exotic_ok || !state.exotic[t.index])
                && requests.fits_in(&state.allocatable[t.index])
                && within_headroom(
                    &pool.instance_types[t.index].capacity,
                    &state.headroom,
                    credit,
                )
        })
        .copied()
        .collect()
}

/// The type a claim would launch as if the pod joined it, and through which of the pod's
/// requirement alternatives (ids in `table`); `None` when it cannot join.
fn claim_growth(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &PoolState,
    claim: &ClaimState,
    pod: &Pod,
    alternatives: &[usize],
    relax_min_values: bool,
) -> Option<(usize, Priced)> {
    let pool = &input.nodepools[claim.pool];
    let requests = claim.requests.add(&pod.requests);
    // A claim already launching without its minValues (or allowed to this attempt) grows
    // like any other.
    let has_min_values = !relax_min_values
        && !claim.min_values_relaxed
        && table
            .get(claim.requirements)
            .iter()
            .any(|(_, r)| r.min_values.is_some());
    for (index, &alternative) in alternatives.iter().enumerate() {
        let Some(merged) = table.merge(claim.requirements, alternative) else {
            continue;
        };
        let fits = |i: usize| {
            requests.fits_in(&state.allocatable[i])
                && within_headroom(
                    &pool.instance_types[i].capacity,
                    &state.headroom,
                    &claim.reserved,
                )
        };
        if !has_min_values {
            // Types stay in price order, so the first that still fits sets the new price.
            let price = if merged == claim.requirements {
                claim.types.iter().find(|t| fits(t.index)).copied()
            } else {
                table
                    .priced_types(pool, claim.pool, state, merged)
                    .iter()
                    .find(|t| (claim.exotic_ok || !state.exotic[t.index]) && fits(t.index))
                    .copied()
            };
            match price {
                Some(cheapest) => return Some((index, cheapest)),
                None => continue,
            }
        }
        let priced = table.priced_types(pool, claim.pool, state, merged);
        let types = fitting_types(
            pool,
            state,
            &priced,
            claim.exotic_ok,
            &requests,
            &claim.reserved,
        );
        if types.is_empty()
            || min_values_met(&types, &pool.instance_types, table.get(merged)).is_err()
        {
            continue;
        }
        return Some((index, types[0]));
    }
    None
}

/// Adds the pod to a claim through `alternative` (an id [`claim_growth`] accepted).
fn add_to_claim(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &mut PoolState,
    claim: &mut ClaimState,
    pod_index: usize,
    alternative: usize,
) {
    let pool = &input.nodepools[claim.pool];
    let requests = claim.requests.add(&input.pods[pod_index].requests);
    let merged = table
        .merge(claim.requirements, alternative)
        .unwrap_or(claim.requirements);
    let types = if merged == claim.requirements {
        claim
            .types
            .iter()
            .filter(|t| {
                requests.fits_in(&state.allocatable[t.index])
                    && within_headroom(
                        &pool.instance_types[t.index].capacity,
                        &state.headroom,
                        &claim.reserved,
                    )
            })
            .copied()
            .collect()
    } else {
        claim.requirements = merged;
        let priced = table.priced_types(pool, claim.pool, state, merged);
        fitting_types(
            pool,
            state,
            &priced,
            claim.exotic_ok,
            &requests,
            &claim.reserved,
        )
    };
    set_types(pool, state, claim, types);
    claim.requests = requests;
    claim.pods.push(pod_index);
    if !claim.min_values_relaxed {
        claim.min_values_relaxed = min_values_met(
            &claim.types,
            &pool.instance_types,
            table.get(claim.requirements),
        )
        .is_err();
    }
}

#[allow(clippy::too_many_arguments)]
fn new_claim(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &PoolState,
    pool_index: usize,
    pod_index: usize,
    alternatives: &[usize],
    tolerated: bool,
    relax_min_values: bool,
) -> Result<ClaimState, String> {
    let pool = &input.nodepools[pool_index];
    let pod = &input.pods[pod_index];
    if !tolerated {
        // PreferNoSchedule taints only keep a pod off until its last attempt.
        let taint = untolerated_avoiding(&pool.taints, &pod.tolerations, true)
            .map(ToString::to_string)
            .unwrap_or_default();
        return Err(format!("untolerated taint {taint}"));
    }
    if state.nodes_left.is_some_and(|n| n <= 0) {
        return Err(format!(
            "limit of {} nodes reached",
            pool.limits.nodes.unwrap_or_default()
        ));
    }
    let requests = state.daemon.add(&pod.requests);
    let exotic_ok = pod.needs_exotic();
    let mut last_error: Option<String> = None;
    for &alt in alternatives {
        let Some(requirements) = table.merge(state.requirements, alt) else {
            if let Err(Incompatible {
                key,
                wanted,
                allowed,
            }) = table.get(alt).compatible_with_template(&pool.requirements)
            {
                last_error = Some(format!(
                    "requirement {key} {wanted} conflicts with the NodePool's {allowed}"
                ));
            }
            continue;
        };
        let priced = table.priced_types(pool, pool_index, state, requirements);
        let candidates: Vec<usize> = priced
            .iter()
            .map(|t| t.index)
            .filter(|i| exotic_ok || !state.exotic[*i])
            .collect();
        if candidates.is_empty() {
            last_error = Some(
                "no instance type with an available offering satisfies the requirements".into(),
            );
            continue;
        }
        if !candidates
            .iter()
            .any(|i| requests.fits_in(&state.allocatable[*i]))
        {
            let biggest = elementwise_max(candidates.iter().map(|i| state.allocatable[*i]));
            let short = requests
                .first_excess(&biggest)
                .map_or("resources", ResourceName::as_str);
            last_error = Some(format!(
                "no instance type has room for {} (with daemonsets {}); insufficient {short}",
                pod.requests, state.daemon
            ));
            continue;
        }
        let types = fitting_types(pool, state, &priced, exotic_ok, &requests, &Resources::ZERO);
        if types.is_empty() {
            last_error = Some("would exceed the NodePool's limits".into());
            continue;
        }
        let mut min_values_relaxed = false;
        if let Err(e) = min_values_met(&types, &pool.instance_types, table.get(requirements)) {
            if !relax_min_values {
                last_error = Some(e);
                continue;
            }
            min_values_relaxed = true;
        }
        return Ok(ClaimState {
            pool: pool_index,
            requirements,
            exotic_ok,
            max_allocatable: elementwise_max(types.iter().map(|t| state.allocatable[t.index])),
            reserved: elementwise_max(types.iter().map(|t| pool.instance_types[t.index].capacity)),
            types,
            requests,
            pods: vec![pod_index],
            min_values_relaxed,
        });
    }
    Err(last_error.unwrap_or_else(|| "incompatible".into()))
}

/// Lowers the price of planned NodeClaims after the greedy pass: for each claim, the fewest
/// pods whose removal lets it launch as the next cheaper type (or, with no cheaper type,
/// all of them) are moved to claims that take them without growing, or the claim is left as
/// it was. A move keeps every constraint of the moved pod and of the pods already on the
/// target (anti-affinity both ways, hostname spread counted with the newcomer) and stays
/// within the same zone and capacity type, so zone-level counts do not change.
fn shrink_claims(
    input: &SchedulingInput,
    constrained_as: &[Option<Pod>],
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
) {
    let rules: Vec<Option<MoveRules>> = input
        .pods
        .iter()
        .zip(constrained_as)
        .map(|(pod, placed_as)| MoveRules::new(placed_as.as_ref().unwrap_or(pod), topology))
        .collect();
    let mut order: Vec<usize> = (0..claims.all.len()).collect();
    // Claims just over a price step first: they need the least moved.
    let overflow = |claim: &ClaimState, table: &mut RequirementTable, state: &PoolState| {
        let pool = &input.nodepools[claim.pool];
        cheaper_target(pool, claim, table, state)
            .map(|t| {
                claim
                    .requests
                    .sub(&state.allocatable[t])
                    .get(ResourceName::Cpu)
            })
            .unwrap_or(i64::MAX)
    };
    let mut keys: Vec<i64> = Vec::with_capacity(order.len());
    for claim in &claims.all {
        keys.push(overflow(claim, table, &pool_states[claim.pool]));
    }
    order.sort_by_key(|&i| (keys[i], i));
    merge_claims(input, table, pool_states, claims, topology, &rules);
    let live = claims.all.iter().filter(|c| !c.pods.is_empty()).count();
    let mut reshuffles = Reshuffles::new(input, pool_states, claims);
    for index in order {
        for _ in 0..SHRINK_STEPS {
            if !shrink_once(
                input,
                table,
                pool_states,
                claims,
                topology,
                &rules,
                index,
                live,
            ) && !reshuffle_once(
                input,
                table,
                pool_states,
                claims,
                topology,
                &rules,
                &mut reshuffles,
                index,
            ) {
                break;
            }
        }
    }
}

/// Partners tried per claim when merging.
const MERGE_PARTNERS: usize = 8;

/// Merges pairs of planned NodeClaims with the same NodePool and requirements when one
/// instance type for both pods costs less than the two (daemonset and system overhead paid
/// once, or a larger type cheaper per unit), cheapest claims first.
fn merge_claims(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
    rules: &[Option<MoveRules>],
) {
    let mut groups: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
    for (i, claim) in claims.all.iter().enumerate() {
        groups
            .entry((claim.pool, claim.requirements, claim.exotic_ok))
            .or_default()
            .push(i);
    }
    for members in groups.into_values() {
        let mut merged_any = true;
        while merged_any {
            merged_any = false;
            let mut by_price: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&i| !claims.all[i].pods.is_empty())
                .collect();
            by_price.sort_by(|a, b| {
                claims.all[*a].types[0]
                    .price
                    .total_cmp(&claims.all[*b].types[0].price)
                    .then(a.cmp(b))
            });
            let mut gone = vec![false; claims.all.len()];
            for (position, &small) in by_price.iter().enumerate() {
                if gone[small] {
                    continue;
                }
                let partners = by_price[position + 1..]
                    .iter()
                    .copied()
                    .filter(|p| !gone[*p])
                    .take(MERGE_PARTNERS)
                    .collect::<Vec<_>>();
                for into in partners {
                    let first = claims.all[small].pods[0];
                    if may_join(input, rules, topology, claims, first, into)
                        && merge_saves(input, table, pool_states, claims, small, into)
                        && merge_into(
                            input,
                            table,
                            pool_states,
                            claims,
                            topology,
                            rules,
                            small,
                            into,
                        )
                    {
                        gone[small] = true;
                        gone[into] = true;
                        merged_any = true;
                        break;
                    }
                }
            }
        }
    }
}

/// Whether one claim holding the pods of both costs less than the two.
fn merge_saves(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &[PoolState],
    claims: &Claims,
    from: usize,
    into: usize,
) -> bool {
    let (source, target) = (&claims.all[from], &claims.all[into]);
    let state = &pool_states[target.pool];
    let pool = &input.nodepools[target.pool];
    // The source's daemonset overhead is not needed twice.
    let requests = target
        .requests
        .add(&source.requests.sub(&state.daemon).max(&Resources::ZERO));
    let credit = target.reserved.add(&source.reserved);
    let priced = table.priced_types(pool, target.pool, state, target.requirements);
    let Some(merged) = priced.iter().find(|t| {
        (target.exotic_ok || !state.exotic[t.index])
            && requests.fits_in(&state.allocatable[t.index])
            && within_headroom(
                &pool.instance_types[t.index].capacity,
                &state.headroom,
                &credit,
            )
    }) else {
        return false;
    };
    merged.price + PRICE_EPSILON < source.types[0].price + target.types[0].price
}

/// Prices closer than this are equal (rounding of summed prices).
const PRICE_EPSILON: f64 = 1e-9;

/// Moves every pod of `from` onto `into` if each may join (undoing the moves otherwise).
#[allow(clippy::too_many_arguments)]
fn merge_into(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
    rules: &[Option<MoveRules>],
    from: usize,
    into: usize,
) -> bool {
    let pods = claims.all[from].pods.clone();
    let mut moved = Vec::new();
    for pod in pods {
        if may_join(input, rules, topology, claims, pod, into) {
            move_pod(input, table, pool_states, claims, topology, pod, from, into);
            moved.push(pod);
            // Limits may leave no type for the two together (the source still reserves its
            // own until it empties), or too few for minValues.
            if launchable(input, table, &claims.all[into]) {
                continue;
            }
        }
        for &back in moved.iter().rev() {
            move_pod(
                input,
                table,
                pool_states,
                claims,
                topology,
                back,
                into,
                from,
            );
        }
        return false;
    }
    true
}

/// Whether a claim still has a type to launch as, and enough of them for its minValues
/// (unless it was planned with them relaxed).
fn launchable(input: &SchedulingInput, table: &RequirementTable, claim: &ClaimState) -> bool {
    !claim.types.is_empty()
        && (claim.min_values_relaxed
            || min_values_met(
                &claim.types,
                &input.nodepools[claim.pool].instance_types,
                table.get(claim.requirements),
            )
            .is_ok())
}

/// Shrink steps tried per claim.
const SHRINK_STEPS: usize = 4;

/// The type a claim would launch as one price step down: the most expensive of its
/// requirements' types that is cheaper than its current one.
fn cheaper_target(
    pool: &NodePoolTemplate,
    claim: &ClaimState,
    table: &mut RequirementTable,
    state: &PoolState,
) -> Option<usize> {
    let current = claim.types.first()?.price;
    let pool_index = claim.pool;
    let priced = table.priced_types(pool, pool_index, state, claim.requirements);
    priced
        .iter()
        .rev()
        .find(|t| t.price < current && (claim.exotic_ok || !state.exotic[t.index]))
        .map(|t| t.index)
}

/// What a pod's constraints say about moving it between planned NodeClaims; `None` for pods
/// that must stay (hostname affinity, which ties them to their node's other pods).
struct MoveRules {
    /// Hard hostname spread groups with their maxSkew, and anti-affinity groups.
    spread: Vec<(Option<usize>, i64)>,
    anti: Vec<Option<usize>>,
    /// Neither constrained nor counted at zone level, so it may change zone.
    zone_free: bool,
}

impl MoveRules {
    fn new(pod: &Pod, topology: &Topology) -> Option<Self> {
        if pod
            .pod_affinity
            .iter()
            .any(|t| !t.anti && t.topology_key == labels::HOSTNAME)
            || topology.matches_hostname_affinity(pod)
        {
            return None;
        }
        Some(MoveRules {
            spread: pod
                .spread
                .iter()
                .filter(|s| !s.schedule_anyway && s.topology_key == labels::HOSTNAME)
                .map(|s| {
                    (
                        topology.group(&CountKey::spread(s, &pod.namespace)),
                        s.max_skew,
                    )
                })
                .collect(),
            anti: pod
                .pod_affinity
                .iter()
                .filter(|t| t.anti && t.topology_key == labels::HOSTNAME)
                .map(|t| topology.group(&CountKey::affinity(t, &pod.namespace)))
                .collect(),
            zone_free: pod
                .spread
                .iter()
                .all(|s| s.topology_key == labels::HOSTNAME)
                && pod
                    .pod_affinity
                    .iter()
                    .all(|t| t.topology_key == labels::HOSTNAME)
                && !topology.matches_zone_level_group(pod),
        })
    }
}

/// Whether pod `moving` may join claim `to` (it is not on it): its own hostname rules, and
/// those of the pods already there, hold with it counted.
fn may_join(
    input: &SchedulingInput,
    rules: &[Option<MoveRules>],
    topology: &Topology,
    claims: &Claims,
    moving: usize,
    to: usize,
) -> bool {
    let Some(own) = &rules[moving] else {
        return false;
    };
    let domain = Domain::Claim(to);
    if own
        .spread
        .iter()
        .any(|(g, max_skew)| topology.count_in(*g, &domain) + 1 > *max_skew)
        || own.anti.iter().any(|g| topology.count_in(*g, &domain) > 0)
    {
        return false;
    }
    let pod = &input.pods[moving];
    if host_ports_taken(input, &claims.all[to], pod) {
        return false;
    }
    claims.all[to].pods.iter().all(|&other| {
        let Some(theirs) = &rules[other] else {
            return true;
        };
        theirs.anti.iter().all(|g| !topology.group_matches(*g, pod))
            && theirs.spread.iter().all(|(g, max_skew)| {
                !topology.group_matches(*g, pod) || topology.count_in(*g, &domain) < *max_skew
            })
    })
}

/// One shrink step of claim `index`; whether it happened.
#[allow(clippy::too_many_arguments)]
fn shrink_once(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
    rules: &[Option<MoveRules>],
    index: usize,
    live: usize,
) -> bool {
    let claim = &claims.all[index];
    if claim.pods.is_empty() {
        return false;
    }
    // A pod kept apart from a pod on every other claim has nowhere to go.
    let stuck = |p: usize| {
        rules[p]
            .as_ref()
            .is_none_or(|r| r.anti.iter().any(|g| topology.occupied_claims(*g) >= live))
    };
    let pool_index = claim.pool;
    let pool = &input.nodepools[pool_index];
    let state = &pool_states[pool_index];
    // What must leave: the excess over the cheaper type, or everything but the daemonsets.
    let excess = match cheaper_target(pool, claim, table, state) {
        Some(target) => claim.requests.sub(&state.allocatable[target]),
        None => claim.requests.sub(&state.daemon),
    }
    .max(&Resources::ZERO);
    let mut movable: Vec<usize> = claim.pods.iter().copied().filter(|&p| !stuck(p)).collect();
    let size = |p: usize| {
        let r = &input.pods[p].requests;
        (r.get(ResourceName::Cpu), r.get(ResourceName::Memory), p)
    };
    movable.sort_by_key(|&p| size(p));
    // The smallest single pod covering the excess, else the largest ones until covered.
    let chosen: Vec<usize> = match movable
        .iter()
        .find(|&&p| excess.fits_in(&input.pods[p].requests))
    {
        Some(&p) => vec![p],
        None => {
            let mut taken = Vec::new();
            let mut freed = Resources::ZERO;
            for &p in movable.iter().rev() {
                if excess.fits_in(&freed) {
                    break;
                }
                freed = freed.add(&input.pods[p].requests);
                taken.push(p);
            }
            if !excess.fits_in(&freed) {
                return false;
            }
            taken
        }
    };
    let mut done: Vec<(usize, usize)> = Vec::new();
    for &pod in &chosen {
        let target = claims.with_room(&input.pods[pod].requests).find(|&to| {
            to != index
                && joins_free(
                    input,
                    table,
                    pool_states,
                    claims,
                    topology,
                    rules,
                    index,
                    to,
                    pod,
                )
                && may_join(input, rules, topology, claims, pod, to)
        });
        let Some(to) = target else {
            for &(pod, to) in done.iter().rev() {
                move_pod(input, table, pool_states, claims, topology, pod, to, index);
            }
            return false;
        };
        move_pod(input, table, pool_states, claims, topology, pod, index, to);
        done.push((pod, to));
    }
    true
}

/// Claims whose pods a reshuffle redistributes besides the one it shrinks.
const RESHUFFLE_PARTNERS: usize = 6;

/// Claims of a class looked at for partners, roomiest (when last sorted) first.
const RESHUFFLE_SCAN: usize = 4 * RESHUFFLE_PARTNERS;

/// Refill placements a round of up to [`FIRST_FIT_GUARD_MAX_PODS`] pods may spend on
/// reshuffles (a few milliseconds; small rounds are where a node saved counts most), and
/// what a larger round may (they are packed tighter already, and must stay fast).
const RESHUFFLE_STEPS_SMALL_ROUND: usize = 8192;
const RESHUFFLE_STEPS: usize = REFILL_STEPS;

/// The claims of each class (NodePool, requirements, exotic types allowed) for reshuffles,
/// roomiest first when last sorted, and the refill placements the round has left for them.
struct Reshuffles {
    classes: BTreeMap<(usize, usize, bool), Vec<usize>>,
    steps_left: usize,
}

impl Reshuffles {
    fn new(input: &SchedulingInput, pool_states: &[PoolState], claims: &Claims) -> Self {
        let mut classes: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
        for (i, claim) in claims.all.iter().enumerate() {
            classes.entry(class_of(claim)).or_default().push(i);
        }
        let mut reshuffles = Reshuffles {
            classes,
            steps_left: if input.pods.len() <= FIRST_FIT_GUARD_MAX_PODS {
                RESHUFFLE_STEPS_SMALL_ROUND
            } else {
                RESHUFFLE_STEPS
            },
        };
        let keys: Vec<_> = reshuffles.classes.keys().copied().collect();
        for key in keys {
            reshuffles.sort(key, pool_states, claims);
        }
        reshuffles
    }

    /// Orders a class roomiest first.
    fn sort(&mut self, key: (usize, usize, bool), pool_states: &[PoolState], claims: &Claims) {
        if let Some(members) = self.classes.get_mut(&key) {
            let room = |i: usize| room_units(&claims.all[i], &pool_states[key.0], claims);
            members.sort_by(|&a, &b| room(b).total_cmp(&room(a)).then(a.cmp(&b)));
        }
    }
}

fn class_of(claim: &ClaimState) -> (usize, usize, bool) {
    (claim.pool, claim.requirements, claim.exotic_ok)
}

/// What a claim has to spare at its price, as CPU, or memory per the round's typical memory
/// per vCPU, in vCPUs (summed: a partner with both takes pods of either shape).
fn room_units(claim: &ClaimState, state: &PoolState, claims: &Claims) -> f64 {
    let Some(cheapest) = claim.types.first() else {
        return 0.0;
    };
    let room = state.allocatable[cheapest.index]
        .sub(&claim.requests)
        .max(&Resources::ZERO);
    room.get(ResourceName::Cpu) as f64 / 1000.0
        + room.get(ResourceName::Memory) as f64 / claims.bytes_per_core
}

/// Lets claim `index` launch one price step cheaper by repacking its pods together with
/// those of the claims of its class (same NodePool and requirements) with the most room:
/// whole-pod moves ([`shrink_once`]) fail when what must leave is coarser than any one
/// partner's room, while pooled rooms of several partners, refilled, often hold it.
/// Partners keep their price or get cheaper; the moves are undone otherwise.
#[allow(clippy::too_many_arguments)]
fn reshuffle_once(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
    rules: &[Option<MoveRules>],
    reshuffles: &mut Reshuffles,
    index: usize,
) -> bool {
    let claim = &claims.all[index];
    let movable = |c: &ClaimState| !c.pods.is_empty() && c.pods.iter().all(|&p| rules[p].is_some());
    if reshuffles.steps_left == 0 || !movable(claim) {
        return false;
    }
    let key = class_of(claim);
    let pool = &input.nodepools[claim.pool];
    let state = &pool_states[claim.pool];
    let Some(target) = cheaper_target(pool, claim, table, state) else {
        return false;
    };
    let capacity = state.allocatable[target];
    let excess = claim.requests.sub(&capacity).max(&Resources::ZERO);
    let mut partners: Vec<(f64, usize)> = reshuffles.classes[&key]
        .iter()
        .copied()
        .filter(|&i| i != index && movable(&claims.all[i]))
        .take(RESHUFFLE_SCAN)
        .map(|i| (room_units(&claims.all[i], state, claims), i))
        .filter(|(room, _)| *room > 0.0)
        .collect();
    partners.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    partners.truncate(RESHUFFLE_PARTNERS);
    // Bins: the shrinking claim at its cheaper type, then the partners at their price.
    let mut bins: Vec<usize> = vec![index];
    bins.extend(partners.iter().map(|&(_, i)| i));
    let capacities: Vec<Resources> = bins
        .iter()
        .map(|&i| match claims.all[i].types.first() {
            Some(t) if i != index => state.allocatable[t.index],
            _ => capacity,
        })
        .collect();
    let pooled_room = bins[1..]
        .iter()
        .zip(&capacities[1..])
        .fold(Resources::ZERO, |acc, (&i, c)| {
            acc.add(&c.sub(&claims.all[i].requests).max(&Resources::ZERO))
        });
    let mut pods: Vec<usize> = bins
        .iter()
        .flat_map(|&i| claims.all[i].pods.iter().copied())
        .collect();
    if !excess.fits_in(&pooled_room) || !whole_units_fit(input, &pods, &capacities, state.daemon) {
        return false;
    }
    let apart = |p: usize| rules[p].as_ref().is_some_and(|r| !r.anti.is_empty());
    let fraction = |p: usize, r: ResourceName| {
        input.pods[p].requests.get(r) as f64 / capacity.get(r).max(1) as f64
    };
    // Pods kept apart from others first (they restrict where the rest go), then largest by
    // each measure of size in turn until one order packs.
    let sizes: [&dyn Fn(usize) -> f64; 3] = [
        &|p| fraction(p, ResourceName::Cpu) + fraction(p, ResourceName::Memory),
        &|p| fraction(p, ResourceName::Memory),
        &|p| fraction(p, ResourceName::Cpu),
    ];
    let mut found = None;
    for size in sizes {
        pods.sort_by(|&a, &b| {
            apart(b)
                .cmp(&apart(a))
                .then(size(b).total_cmp(&size(a)))
                .then(a.cmp(&b))
        });
        let steps = REFILL_STEPS.min(reshuffles.steps_left);
        let (assignment, used) = refill(
            input,
            topology,
            rules,
            &pods,
            &capacities,
            state.daemon,
            steps,
        );
        reshuffles.steps_left -= used;
        if assignment.is_some() || reshuffles.steps_left == 0 {
            found = assignment;
            break;
        }
    }
    let Some(assignment) = found else {
        return false;
    };
    let before: Vec<f64> = bins
        .iter()
        .map(|&i| claims.all[i].types.first().map_or(0.0, |t| t.price))
        .collect();
    let mut moves: Vec<(usize, usize, usize)> = Vec::new();
    for (&pod, &bin) in pods.iter().zip(&assignment) {
        let from = bins
            .iter()
            .copied()
            .find(|&b| claims.all[b].pods.contains(&pod));
        let Some(from) = from else { continue };
        let to = bins[bin];
        if from != to {
            move_pod(input, table, pool_states, claims, topology, pod, from, to);
            moves.push((pod, from, to));
        }
    }
    let kept = bins.iter().zip(&before).all(|(&i, &price)| {
        let c = &claims.all[i];
        c.pods.is_empty()
            || c.types
                .first()
                .is_some_and(|t| t.price <= price + PRICE_EPSILON)
                && launchable(input, table, c)
    });
    let after: f64 = bins
        .iter()
        .map(|&i| claims.all[i].types.first().map_or(0.0, |t| t.price))
        .sum();
    if kept && after + PRICE_EPSILON < before.iter().sum::<f64>() {
        reshuffles.sort(key, pool_states, claims);
        return true;
    }
    for &(pod, from, to) in moves.iter().rev() {
        move_pod(input, table, pool_states, claims, topology, pod, to, from);
    }
    false
}

/// A quick necessary condition for packing `pods` into bins of `capacities` (each holding
/// `daemon`): for CPU and memory, pods whose request is a multiple of one of the requested
/// values fill a bin only in whole multiples of it (the bound's rounding cut, per bin).
fn whole_units_fit(
    input: &SchedulingInput,
    pods: &[usize],
    capacities: &[Resources],
    daemon: Resources,
) -> bool {
    [ResourceName::Cpu, ResourceName::Memory]
        .into_iter()
        .all(|r| {
            let mut units: Vec<i64> = pods
                .iter()
                .map(|&p| input.pods[p].requests.get(r))
                .filter(|q| *q > 0)
                .collect();
            units.sort_unstable();
            units.dedup();
            units.iter().all(|&unit| {
                let needed: i64 = pods
                    .iter()
                    .map(|&p| input.pods[p].requests.get(r))
                    .filter(|q| *q > 0 && q % unit == 0)
                    .sum();
                let held: i64 = capacities
                    .iter()
                    .map(|c| (c.get(r) - daemon.get(r)).max(0) / unit * unit)
                    .sum();
                needed <= held
            })
        })
}

/// Placements a refill tries before giving up (it backtracks, so it is bounded).
const REFILL_STEPS: usize = 1024;

/// Packs `pods` (in order) into bins of the given capacities, each already holding the
/// daemonset overhead, so that each pod may join its bin (hostname anti-affinity and spread
/// both ways, host ports): depth first, each pod trying the bins it leaves tightest first,
/// backtracking within `steps` placements. The bin of each pod, or `None`, and the steps
/// used.
fn refill(
    input: &SchedulingInput,
    topology: &Topology,
    rules: &[Option<MoveRules>],
    pods: &[usize],
    capacities: &[Resources],
    daemon: Resources,
    steps: usize,
) -> (Option<Vec<usize>>, usize) {
    if pods.iter().any(|&p| rules[p].is_none()) {
        return (None, 0);
    }
    let mut search = Refill {
        input,
        topology,
        rules,
        pods,
        capacities,
        loads: vec![daemon; capacities.len()],
        members: vec![Vec::new(); capacities.len()],
        assignment: Vec::with_capacity(pods.len()),
        steps_left: steps,
    };
    let packed = search.extend();
    (
        packed.then_some(search.assignment),
        steps - search.steps_left,
    )
}

/// The state of one [`refill`] search.
struct Refill<'a> {
    input: &'a SchedulingInput,
    topology: &'a Topology,
    rules: &'a [Option<MoveRules>],
    pods: &'a [usize],
    capacities: &'a [Resources],
    loads: Vec<Resources>,
    members: Vec<Vec<usize>>,
    assignment: Vec<usize>,
    steps_left: usize,
}

impl Refill<'_> {
    /// Places the next pod and, recursively, the rest; whether all were placed.
    fn extend(&mut self) -> bool {
        let Some(&p) = self.pods.get(self.assignment.len()) else {
            return true;
        };
        let pod = &self.input.pods[p];
        let mut candidates: Vec<(f64, usize)> = Vec::with_capacity(self.capacities.len());
        for (bin, capacity) in self.capacities.iter().enumerate() {
            let load = self.loads[bin].add(&pod.requests);
            if !load.fits_in(capacity) || !self.may_join(p, bin) {
                continue;
            }
            // Two empty bins of one capacity are interchangeable: try only the first.
            if self.members[bin].is_empty()
                && candidates
                    .iter()
                    .any(|&(_, b)| self.members[b].is_empty() && self.capacities[b] == *capacity)
            {
                continue;
            }
            let left = capacity.sub(&load);
            let tightness = left.get(ResourceName::Cpu) as f64
                / capacity.get(ResourceName::Cpu).max(1) as f64
                + left.get(ResourceName::Memory) as f64
                    / capacity.get(ResourceName::Memory).max(1) as f64;
            candidates.push((tightness, bin));
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, bin) in candidates {
            if self.steps_left == 0 {
                return false;
            }
            self.steps_left -= 1;
            self.loads[bin] = self.loads[bin].add(&pod.requests);
            self.members[bin].push(p);
            self.assignment.push(bin);
            if self.extend() {
                return true;
            }
            self.assignment.pop();
            self.members[bin].pop();
            self.loads[bin] = self.loads[bin].sub(&pod.requests);
        }
        false
    }

    /// Whether pod `p` may join the pods of `bin` under their hostname rules and its own.
    fn may_join(&self, p: usize, bin: usize) -> bool {
        let (input, topology) = (self.input, self.topology);
        let pod = &input.pods[p];
        let here = &self.members[bin];
        let count = |group: Option<usize>| {
            here.iter()
                .filter(|&&q| topology.group_matches(group, &input.pods[q]))
                .count() as i64
        };
        let Some(own) = &self.rules[p] else {
            return false;
        };
        own.anti.iter().all(|g| count(*g) == 0)
            && own.spread.iter().all(|(g, max_skew)| {
                count(*g) + i64::from(topology.group_matches(*g, pod)) <= *max_skew
            })
            && here.iter().all(|&q| {
                !ports_conflict(&input.pods[q].host_ports, &pod.host_ports)
                    && self.rules[q].as_ref().is_none_or(|r| {
                        r.anti.iter().all(|g| !topology.group_matches(*g, pod))
                            && r.spread.iter().all(|(g, max_skew)| {
                                !topology.group_matches(*g, pod) || count(*g) < *max_skew
                            })
                    })
            })
    }
}

/// Whether claim `to` takes `pod` from claim `from` at its current price, with requirements
/// implying the source's, in the same zone and capacity type unless the pod is zone-free.
#[allow(clippy::too_many_arguments)]
fn joins_free(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &[PoolState],
    claims: &Claims,
    topology: &Topology,
    rules: &[Option<MoveRules>],
    from: usize,
    to: usize,
    pod: usize,
) -> bool {
    let (source, target) = (&claims.all[from], &claims.all[to]);
    let zone_free = rules[pod].as_ref().is_some_and(|r| r.zone_free);
    if target.pods.is_empty()
        || untolerated(
            &input.nodepools[target.pool].taints,
            &input.pods[pod].tolerations,
        )
        .is_some()
        || table.merge(target.requirements, source.requirements) != Some(target.requirements)
    {
        return false;
    }
    if !zone_free {
        let (a, b) = (
            table.get(source.requirements),
            table.get(target.requirements),
        );
        for key in topology.domain_keys() {
            if topology::claim_domain(a, from, key) != topology::claim_domain(b, to, key) {
                return false;
            }
        }
    }
    let state = &pool_states[target.pool];
    let Some(cheapest) = target.types.first() else {
        return false;
    };
    let requests = target.requests.add(&input.pods[pod].requests);
    if !requests.fits_in(&state.allocatable[cheapest.index]) {
        return false;
    }
    let requirements = table.get(target.requirements);
    if !target.min_values_relaxed && requirements.iter().any(|(_, r)| r.min_values.is_some()) {
        let pool = &input.nodepools[target.pool];
        let kept: Vec<Priced> = target
            .types
            .iter()
            .filter(|t| requests.fits_in(&state.allocatable[t.index]))
            .copied()
            .collect();
        return min_values_met(&kept, &pool.instance_types, requirements).is_ok();
    }
    true
}

/// Moves a pod between planned NodeClaims, refitting both and their topology counts.
#[allow(clippy::too_many_arguments)]
fn move_pod(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    pool_states: &mut [PoolState],
    claims: &mut Claims,
    topology: &mut Topology,
    pod: usize,
    from: usize,
    to: usize,
) {
    let requests = input.pods[pod].requests;
    let source = &mut claims.all[from];
    source.pods.retain(|&p| p != pod);
    source.requests = source.requests.sub(&requests);
    if source.pods.is_empty() {
        retire(&mut pool_states[source.pool], source);
    } else {
        refit(input, table, &mut pool_states[source.pool], source);
    }
    let target = &mut claims.all[to];
    if target.pods.is_empty() {
        // Moving back into a retired claim revives it.
        let state = &mut pool_states[target.pool];
        if let Some(n) = &mut state.nodes_left {
            *n -= 1;
        }
        target.requests = state.daemon;
    }
    target.pods.push(pod);
    target.requests = target.requests.add(&requests);
    refit(input, table, &mut pool_states[target.pool], target);
    let pools = (claims.all[from].pool, claims.all[to].pool);
    claims.reindex(from, &pool_states[pools.0].allocatable);
    claims.reindex(to, &pool_states[pools.1].allocatable);
    topology.move_between_claims(&input.pods[pod], from, to);
}

/// Gives up a claim whose pods all moved: its limit reservation and node count return to
/// the pool, and it plans no launch.
fn retire(state: &mut PoolState, claim: &mut ClaimState) {
    for r in ResourceName::ALL {
        if let Some(h) = &mut state.headroom[r as usize] {
            *h += claim.reserved.get(r);
        }
    }
    if let Some(n) = &mut state.nodes_left {
        *n += 1;
    }
    claim.reserved = Resources::ZERO;
    claim.max_allocatable = Resources::ZERO;
    claim.requests = Resources::ZERO;
    claim.types.clear();
}

/// Gives a claim new launch options, moving its limit reservation (the largest capacity
/// among them) with them.
fn set_types(
    pool: &NodePoolTemplate,
    state: &mut PoolState,
    claim: &mut ClaimState,
    types: Vec<Priced>,
) {
    let reserved = elementwise_max(types.iter().map(|t| pool.instance_types[t.index].capacity));
    for r in ResourceName::ALL {
        if let Some(h) = &mut state.headroom[r as usize] {
            *h += claim.reserved.get(r) - reserved.get(r);
        }
    }
    claim.max_allocatable = elementwise_max(types.iter().map(|t| state.allocatable[t.index]));
    claim.reserved = reserved;
    claim.types = types;
}

/// Recomputes a claim's launch options after its pods changed.
fn refit(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &mut PoolState,
    claim: &mut ClaimState,
) {
    let pool = &input.nodepools[claim.pool];
    let priced = table.priced_types(pool, claim.pool, state, claim.requirements);
    let types = fitting_types(
        pool,
        state,
        &priced,
        claim.exotic_ok,
        &claim.requests,
        &claim.reserved,
    );
    set_types(pool, state, claim, types);
}
