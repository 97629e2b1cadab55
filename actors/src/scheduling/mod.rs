//! One binpacking round, pure and deterministic: pending pods and the cluster in, bindings to
//! existing nodes, planned NodeClaims and reasons for the rest out.
//!
//! First-fit decreasing, as upstream: pods sorted by CPU then memory (descending), each tried
//! on existing nodes, then on NodeClaims already planned this round, then on a new NodeClaim
//! from each NodePool in weight order. A planned NodeClaim keeps every instance type that
//! still fits what it was given, so the launch can fall back to the next cheapest.
//!
//! Modelled here: requests (with daemonset overhead per NodePool), node selectors and
//! required node affinity (OR of terms), taints and tolerations, NodePool requirements,
//! limits (pessimistically: a planned NodeClaim reserves the largest capacity among its
//! options) and weights, minValues, exotic instance types only for pods that need them, and
//! topology spread over zone, capacity type and hostname (`matchLabels` selectors, maxSkew;
//! `DoNotSchedule` kept, `ScheduleAnyway` tried then relaxed): a spread pod is pinned to the
//! emptiest allowed domain that takes it; and required pod affinity and anti-affinity on
//! the same keys (`matchLabels`, explicit namespaces), where the first of a group of pods
//! with affinity to each other may go anywhere. Not modelled yet: preferred (anti-)affinity,
//! other topology keys, `matchExpressions` and namespace selectors (such pods are reported
//! unschedulable with the constraint named, never placed while ignoring it), and existing
//! pods' anti-affinity against newcomers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::api::labels;
use crate::model::pod::TopologySpread;
use crate::model::requirements::Incompatible;
use crate::model::taints::untolerated;
use crate::model::{InstanceType, Pod, Requirement, Requirements, ResourceName, Resources, Taint};
use topology::{CountKey, Domain, Topology};

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
}

/// An instance type a planned NodeClaim may launch as, with its cheapest allowed offering.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceTypeOption {
    /// Instance type name.
    pub name: String,
    /// USD/hour of the cheapest offering the NodeClaim's requirements allow.
    pub price: f64,
    /// Zone of that offering.
    pub zone: String,
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
    daemon: Resources,
    /// Limit headroom, `None` where unlimited.
    headroom: [Option<i64>; crate::model::resources::RESOURCE_COUNT],
    nodes_left: Option<i64>,
}

struct ClaimState {
    pool: usize,
    requirements: Requirements,
    types: Vec<usize>,
    max_allocatable: Resources,
    reserved: Resources,
    requests: Resources,
    pods: Vec<usize>,
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
    types: &[usize],
    all: &[Arc<InstanceType>],
    requirements: &Requirements,
) -> Result<(), String> {
    for (key, requirement) in requirements.iter() {
        let Some(min) = requirement.min_values else {
            continue;
        };
        let mut distinct: Vec<&str> = types
            .iter()
            .filter_map(|i| all[*i].labels.get(key).map(String::as_str))
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

/// Runs one round.
pub fn solve(input: &SchedulingInput) -> SchedulingResult {
    let mut pools: Vec<usize> = (0..input.nodepools.len()).collect();
    pools.sort_by(|a, b| {
        let (a, b) = (&input.nodepools[*a], &input.nodepools[*b]);
        b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name))
    });
    let mut pool_states: Vec<PoolState> = input
        .nodepools
        .iter()
        .map(|p| pool_state(p, &input.daemonsets))
        .collect();
    let mut existing_requested: Vec<Resources> =
        input.existing.iter().map(|n| n.requested).collect();

    let mut order: Vec<usize> = (0..input.pods.len()).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&input.pods[*a], &input.pods[*b]);
        b.requests
            .get(ResourceName::Cpu)
            .cmp(&a.requests.get(ResourceName::Cpu))
            .then_with(|| {
                b.requests
                    .get(ResourceName::Memory)
                    .cmp(&a.requests.get(ResourceName::Memory))
            })
            .then_with(|| a.uid.cmp(&b.uid))
    });

    let mut result = SchedulingResult::default();
    let mut claims: Vec<ClaimState> = Vec::new();
    let mut topology = Topology::new(&input.pods, &input.existing);
    let pool_domains = pool_domains(input, &pool_states);
    'pods: for pod_index in order {
        let pod = &input.pods[pod_index];
        let unplaceable = if !pod.unknown_resources.is_empty() {
            Some(format!(
                "requests resources no instance type provides: {}",
                pod.unknown_resources.join(", ")
            ))
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
        let base = pod.requirement_alternatives();
        let tolerated: Vec<bool> = input
            .nodepools
            .iter()
            .map(|p| untolerated(&p.taints, &pod.tolerations).is_none())
            .collect();
        // Preferences (ScheduleAnyway) are tried first, then relaxed.
        let all: Vec<&TopologySpread> = pod.spread.iter().collect();
        let hard: Vec<&TopologySpread> = pod.spread.iter().filter(|s| !s.schedule_anyway).collect();
        let attempts = if hard.len() < all.len() {
            vec![all, hard]
        } else {
            vec![all]
        };
        let mut reasons = Vec::new();
        for constraints in attempts {
            let universe = if constraints.is_empty() && pod.pod_affinity.is_empty() {
                BTreeMap::new()
            } else {
                spread_universe(input, &pool_domains, &tolerated, &base)
            };
            let choices = domain_choices(&topology, &constraints, pod, &base, &universe);
            if choices.is_empty() {
                let keys: BTreeSet<&str> = constraints
                    .iter()
                    .map(|c| c.topology_key.as_str())
                    .chain(pod.pod_affinity.iter().map(|t| t.topology_key.as_str()))
                    .filter(|k| *k != labels::HOSTNAME)
                    .collect();
                reasons = vec![format!(
                    "no {} satisfies the pod's requirements, topology spread (within maxSkew) and pod (anti-)affinity together",
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
                let placed = place(
                    input,
                    pod_index,
                    &alternatives,
                    &hostname,
                    &topology,
                    &tolerated,
                    &pools,
                    &mut existing_requested,
                    &mut claims,
                    &mut pool_states,
                );
                match placed {
                    Ok(Placed::Existing(i)) => {
                        let node = &input.existing[i];
                        topology.record(pod, |key| topology::existing_domain(node, key));
                        result.bindings.push(Binding {
                            pod: pod.uid.clone(),
                            node: node.name.clone(),
                        });
                        continue 'pods;
                    }
                    Ok(Placed::Claim(i)) => {
                        let requirements = &claims[i].requirements;
                        topology.record(pod, |key| topology::claim_domain(requirements, i, key));
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
        result.unschedulable.push(Unschedulable {
            pod: pod.uid.clone(),
            reason,
        });
    }

    result.new_claims = claims
        .into_iter()
        .map(|claim| {
            let pool = &input.nodepools[claim.pool];
            let mut options: Vec<InstanceTypeOption> = claim
                .types
                .iter()
                .filter_map(|i| {
                    let it = &pool.instance_types[*i];
                    it.cheapest_offering(&claim.requirements)
                        .map(|o| InstanceTypeOption {
                            name: it.name.clone(),
                            price: o.price,
                            zone: o.zone.clone(),
                            capacity_type: o.capacity_type,
                        })
                })
                .collect();
            options.sort_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.name.cmp(&b.name))
            });
            PlannedNodeClaim {
                nodepool: pool.name.clone(),
                requirements: claim.requirements,
                instance_types: options,
                pods: claim
                    .pods
                    .iter()
                    .map(|p| input.pods[*p].uid.clone())
                    .collect(),
                requests: claim.requests,
            }
        })
        .collect();
    result
}

/// Where a pod went.
enum Placed {
    Existing(usize),
    Claim(usize),
}

/// The combinations of zone-like domains (`topology.kubernetes.io/zone`,
/// `karpenter.sh/capacity-type`) a pod's spread constraints allow, emptiest first. One empty
/// combination when it has none; no combination when nothing is allowed.
fn domain_choices(
    topology: &Topology,
    constraints: &[&TopologySpread],
    pod: &Pod,
    base: &[Requirements],
    universe: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Vec<(String, String)>> {
    let mut per_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut narrow = |key: &'static str, allowed: Vec<String>| {
        per_key
            .entry(key)
            .and_modify(|existing| existing.retain(|d| allowed.contains(d)))
            .or_insert(allowed);
    };
    for c in constraints
        .iter()
        .filter(|c| c.topology_key != labels::HOSTNAME)
    {
        let key = if c.topology_key == labels::ZONE {
            labels::ZONE
        } else {
            labels::CAPACITY_TYPE
        };
        narrow(
            key,
            topology.allowed_domains(c, &pod.namespace, base, universe),
        );
    }
    for term in pod
        .pod_affinity
        .iter()
        .filter(|t| t.topology_key != labels::HOSTNAME)
    {
        let key = if term.topology_key == labels::ZONE {
            labels::ZONE
        } else {
            labels::CAPACITY_TYPE
        };
        let count_key = CountKey::affinity(term, &pod.namespace);
        let eligible: Vec<String> = universe
            .get(key)
            .into_iter()
            .flatten()
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
            occupied.into_iter().collect()
        };
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

    /// Whether a new NodeClaim may take it (an empty node has no pod to be near).
    fn allows_new_node(&self) -> bool {
        self.affinity.is_empty() || self.first_of_group
    }
}

/// Tries existing nodes, then NodeClaims planned this round, then a new NodeClaim per
/// NodePool in weight order. Returns one reason per NodePool when nothing fits.
#[allow(clippy::too_many_arguments)]
fn place(
    input: &SchedulingInput,
    pod_index: usize,
    alternatives: &[Requirements],
    hostname: &HostnameRules,
    topology: &Topology,
    tolerated: &[bool],
    pools: &[usize],
    existing_requested: &mut [Resources],
    claims: &mut Vec<ClaimState>,
    pool_states: &mut [PoolState],
) -> Result<Placed, Vec<String>> {
    let pod = &input.pods[pod_index];
    let room_on = |domain: &Domain| hostname.is_empty() || hostname.allows(topology, domain);
    for (i, node) in input.existing.iter().enumerate() {
        if untolerated(&node.taints, &pod.tolerations).is_some()
            || !alternatives
                .iter()
                .any(|alt| alt.matches_labels(&node.labels).is_ok())
            || !(hostname.is_empty()
                || topology::existing_domain(node, labels::HOSTNAME).is_some_and(|d| room_on(&d)))
        {
            continue;
        }
        let after = existing_requested[i].add(&pod.requests);
        if after.fits_in(&node.allocatable) {
            existing_requested[i] = after;
            return Ok(Placed::Existing(i));
        }
    }
    for (index, claim) in claims.iter_mut().enumerate() {
        if !tolerated[claim.pool]
            || !claim
                .requests
                .add(&pod.requests)
                .fits_in(&claim.max_allocatable)
            || !room_on(&Domain::Claim(index))
        {
            continue;
        }
        if try_add_to_claim(input, pool_states, claim, pod_index, alternatives) {
            return Ok(Placed::Claim(index));
        }
    }
    let mut reasons = Vec::new();
    if !hostname.allows_new_node() {
        reasons.push(
            "pod affinity: must share a node with a matching pod, and none has room".to_owned(),
        );
        return Err(reasons);
    }
    for &pool_index in pools {
        match new_claim(
            input,
            &pool_states[pool_index],
            pool_index,
            pod_index,
            alternatives,
            tolerated[pool_index],
        ) {
            Ok(claim) => {
                let state = &mut pool_states[pool_index];
                for r in ResourceName::ALL {
                    if let Some(h) = &mut state.headroom[r as usize] {
                        *h -= claim.reserved.get(r);
                    }
                }
                if let Some(n) = &mut state.nodes_left {
                    *n -= 1;
                }
                claims.push(claim);
                return Ok(Placed::Claim(claims.len() - 1));
            }
            Err(reason) => reasons.push(format!(
                "nodepool {:?}: {reason}",
                input.nodepools[pool_index].name
            )),
        }
    }
    Err(reasons)
}

type Domains = BTreeMap<String, BTreeSet<String>>;

/// Per NodePool: the zones and capacity types its new nodes could have.
fn pool_domains(input: &SchedulingInput, pool_states: &[PoolState]) -> Vec<Domains> {
    input
        .nodepools
        .iter()
        .zip(pool_states)
        .map(|(pool, state)| {
            let mut out = Domains::new();
            for i in &state.types {
                for o in pool.instance_types[*i].offerings_for(&pool.requirements) {
                    out.entry(labels::ZONE.to_owned())
                        .or_default()
                        .insert(o.zone.clone());
                    out.entry(labels::CAPACITY_TYPE.to_owned())
                        .or_default()
                        .insert(o.capacity_type.as_str().to_owned());
                }
            }
            out
        })
        .collect()
}

/// A pod's eligible spread domains: those of the NodePools it could use (taints tolerated,
/// requirements compatible) and of the existing nodes its node affinity matches
/// (kube-scheduler's nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore).
fn spread_universe(
    input: &SchedulingInput,
    pool_domains: &[Domains],
    tolerated: &[bool],
    alternatives: &[Requirements],
) -> Domains {
    let mut out = Domains::new();
    for (i, pool) in input.nodepools.iter().enumerate() {
        if tolerated[i]
            && alternatives
                .iter()
                .any(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
        {
            for (key, values) in &pool_domains[i] {
                out.entry(key.clone())
                    .or_default()
                    .extend(values.iter().cloned());
            }
        }
    }
    for node in &input.existing {
        if alternatives
            .iter()
            .any(|alt| alt.matches_labels(&node.labels).is_ok())
        {
            for key in [labels::ZONE, labels::CAPACITY_TYPE] {
                if let Some(v) = node.labels.get(key) {
                    out.entry(key.to_owned()).or_default().insert(v.clone());
                }
            }
        }
    }
    out
}

fn pool_state(pool: &NodePoolTemplate, daemonsets: &[Pod]) -> PoolState {
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
        daemon,
        headroom,
        nodes_left: pool.limits.nodes.map(|n| n - pool.node_count),
    }
}

/// Narrows a candidate type list to those compatible with `requirements` (when they changed),
/// with room for `requests`, an allowed offering and limit headroom.
fn fitting_types(
    pool: &NodePoolTemplate,
    candidates: &[usize],
    requirements: &Requirements,
    requirements_changed: bool,
    requests: &Resources,
    headroom: &[Option<i64>],
    credit: &Resources,
) -> Vec<usize> {
    candidates
        .iter()
        .copied()
        .filter(|i| {
            let it = &pool.instance_types[*i];
            requests.fits_in(&it.allocatable())
                && within_headroom(&it.capacity, headroom, credit)
                && (!requirements_changed
                    || (it.requirements.compatible(requirements).is_ok()
                        && it.cheapest_offering(requirements).is_some()))
        })
        .collect()
}

fn try_add_to_claim(
    input: &SchedulingInput,
    pool_states: &mut [PoolState],
    claim: &mut ClaimState,
    pod_index: usize,
    alternatives: &[Requirements],
) -> bool {
    let pool = &input.nodepools[claim.pool];
    let pod = &input.pods[pod_index];
    let requests = claim.requests.add(&pod.requests);
    for alt in alternatives {
        let changed = alt.iter().next().is_some();
        let requirements = if changed {
            if alt.compatible_with_template(&claim.requirements).is_err() {
                continue;
            }
            let mut r = claim.requirements.clone();
            r.intersect_with(alt);
            r
        } else {
            claim.requirements.clone()
        };
        let state = &pool_states[claim.pool];
        let types = fitting_types(
            pool,
            &claim.types,
            &requirements,
            changed,
            &requests,
            &state.headroom,
            &claim.reserved,
        );
        if types.is_empty() || min_values_met(&types, &pool.instance_types, &requirements).is_err()
        {
            continue;
        }
        let reserved = elementwise_max(types.iter().map(|i| pool.instance_types[*i].capacity));
        let state = &mut pool_states[claim.pool];
        for r in ResourceName::ALL {
            if let Some(h) = &mut state.headroom[r as usize] {
                *h += claim.reserved.get(r) - reserved.get(r);
            }
        }
        claim.max_allocatable =
            elementwise_max(types.iter().map(|i| pool.instance_types[*i].allocatable()));
        claim.reserved = reserved;
        claim.types = types;
        claim.requirements = requirements;
        claim.requests = requests;
        claim.pods.push(pod_index);
        return true;
    }
    false
}

fn new_claim(
    input: &SchedulingInput,
    state: &PoolState,
    pool_index: usize,
    pod_index: usize,
    alternatives: &[Requirements],
    tolerated: bool,
) -> Result<ClaimState, String> {
    let pool = &input.nodepools[pool_index];
    let pod = &input.pods[pod_index];
    if !tolerated {
        let taint = untolerated(&pool.taints, &pod.tolerations)
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
    for alt in alternatives {
        if let Err(Incompatible {
            key,
            wanted,
            allowed,
        }) = alt.compatible_with_template(&pool.requirements)
        {
            last_error = Some(format!(
                "requirement {key} {wanted} conflicts with the NodePool's {allowed}"
            ));
            continue;
        }
        let mut requirements = pool.requirements.clone();
        requirements.intersect_with(alt);
        let candidates: Vec<usize> = state
            .types
            .iter()
            .copied()
            .filter(|i| exotic_ok || !pool.instance_types[*i].is_exotic())
            .filter(|i| {
                let it = &pool.instance_types[*i];
                it.requirements.compatible(&requirements).is_ok()
                    && it.cheapest_offering(&requirements).is_some()
            })
            .collect();
        if candidates.is_empty() {
            last_error = Some(
                "no instance type with an available offering satisfies the requirements".into(),
            );
            continue;
        }
        let fits: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|i| requests.fits_in(&pool.instance_types[*i].allocatable()))
            .collect();
        if fits.is_empty() {
            let biggest = elementwise_max(
                candidates
                    .iter()
                    .map(|i| pool.instance_types[*i].allocatable()),
            );
            let short = requests
                .first_excess(&biggest)
                .map_or("resources", ResourceName::as_str);
            last_error = Some(format!(
                "no instance type has room for {} (with daemonsets {}); insufficient {short}",
                pod.requests, state.daemon
            ));
            continue;
        }
        let types: Vec<usize> = fits
            .into_iter()
            .filter(|i| {
                within_headroom(
                    &pool.instance_types[*i].capacity,
                    &state.headroom,
                    &Resources::ZERO,
                )
            })
            .collect();
        if types.is_empty() {
            last_error = Some("would exceed the NodePool's limits".into());
            continue;
        }
        if let Err(e) = min_values_met(&types, &pool.instance_types, &requirements) {
            last_error = Some(e);
            continue;
        }
        return Ok(ClaimState {
            pool: pool_index,
            requirements,
            max_allocatable: elementwise_max(
                types.iter().map(|i| pool.instance_types[*i].allocatable()),
            ),
            reserved: elementwise_max(types.iter().map(|i| pool.instance_types[*i].capacity)),
            types,
            requests,
            pods: vec![pod_index],
        });
    }
    Err(last_error.unwrap_or_else(|| "incompatible".into()))
}
