//! Between the cluster and a scheduling round, both ways, as the scheduler actor uses it:
//! what a round is given about capacity already there or on its way ([`existing_nodes`]:
//! nodes with what the pods nominated to them add, and NodeClaims launched whose nodes have
//! not joined yet), what its decisions become ([`plans`]: named NodeClaim plans, and
//! [`round_record`]: the journal's record of the round), and when a pod stops waiting for
//! the node a round found for it ([`nominations`]); and the scheduler's book of pods
//! between rounds ([`book`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::events::{NodeClaimPlan, RoundInput, RoundRecord};
use crate::model::pod::HostPort;
use crate::model::volumes::VolumeAttachment;
use crate::model::{Pod, Requirements, Resources, Taint};
use crate::ports::{Instance, NodeInfo};
use crate::scheduling::{
    AntiAffinityOf, ExistingNode, NodePoolTemplate, PlannedNodeClaim, PodLabels, SchedulingResult,
    anti_affinity_of,
};
use crate::vocab::labels;

pub mod book;
pub mod nominations;

/// A NodeClaim the scheduler planned, as the next round needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct InFlight<'a> {
    /// Its name (what pods nominated to it name).
    pub name: &'a str,
    /// Its NodePool.
    pub nodepool: &'a str,
    /// Its instance, once launched.
    pub instance: Option<&'a Instance>,
    /// Its NodeClaim's labels (which its Node registers with), when known.
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// What the pods nominated to one NodeClaim add to its node.
#[derive(Debug, Clone, Default)]
struct Nominated {
    requests: Resources,
    pods: Vec<PodLabels>,
    anti_affinity: Vec<AntiAffinityOf>,
    host_ports: Vec<HostPort>,
    volumes: Vec<VolumeAttachment>,
}

impl Nominated {
    fn of<'p>(nominated: impl IntoIterator<Item = (&'p str, &'p Pod)>) -> BTreeMap<&'p str, Self> {
        let mut out: BTreeMap<&str, Nominated> = BTreeMap::new();
        for (claim, pod) in nominated {
            let entry = out.entry(claim).or_default();
            entry.requests = entry.requests.add(&pod.requests);
            entry.pods.push((pod.namespace.clone(), pod.labels.clone()));
            entry.anti_affinity.extend(anti_affinity_of(pod));
            entry.host_ports.extend(pod.host_ports.iter().cloned());
            entry.volumes.extend(pod.volume_attachments.iter().cloned());
        }
        out
    }
}

/// The nodes a round may bind pods to: every node (without its pool's startup taints until
/// it is initialized), with the requests, labels, anti-affinity, host ports and volumes of
/// the pods nominated to its NodeClaim counted as used; then each launched NodeClaim whose
/// node has not joined yet, as the node it will be (its instance type's allocatable less the
/// requests and host ports of the daemonsets that run on it, its NodeClaim's labels). A
/// cordoned node carries Kubernetes'
/// `node.kubernetes.io/unschedulable:NoSchedule` taint, as the API server gives it: it takes
/// no pods that do not tolerate it, yet its pods still count for topology spread (whose
/// default `nodeTaintsPolicy` ignores taints, as kube-scheduler counts them); its NodeClaim
/// is not counted as capacity on its way either. In name order, the solver's.
pub fn existing_nodes<'p>(
    nodes: Vec<NodeInfo>,
    claims: &[InFlight<'_>],
    nominated: impl IntoIterator<Item = (&'p str, &'p Pod)>,
    templates: &[NodePoolTemplate],
    daemonsets: &[Pod],
) -> Vec<ExistingNode> {
    let nominated = Nominated::of(nominated);
    let none = Nominated::default();
    let mut joined = BTreeSet::new();
    let mut out = Vec::new();
    for node in nodes {
        let claim = claims.iter().find(|c| {
            c.instance
                .is_some_and(|i| i.provider_id == node.provider_id)
        });
        if let Some(claim) = claim {
            joined.insert(claim.name);
        }
        let mut node = node;
        if node.unschedulable
            && !node
                .taints
                .iter()
                .any(|t| t.key == labels::UNSCHEDULABLE_TAINT)
        {
            node.taints
                .push(Taint::new(labels::UNSCHEDULABLE_TAINT, "", "NoSchedule"));
        }
        let extra = claim.and_then(|c| nominated.get(c.name)).unwrap_or(&none);
        without_startup_taints(&mut node, templates);
        out.push(joined_node(node, extra));
    }
    for claim in claims {
        if joined.contains(claim.name) {
            continue;
        }
        let extra = nominated.get(claim.name).unwrap_or(&none);
        if let Some(node) = launched_node(claim, extra, templates, daemonsets) {
            out.push(node);
        }
    }
    // The solver's order; handed over in it, the round's input is not copied to sort it.
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A node of a NodePool that has not been initialized yet loses its pool's startup taints:
/// they are expected to go away (as upstream ignores them, with the ephemeral ones every
/// round ignores anyway).
fn without_startup_taints(node: &mut NodeInfo, templates: &[NodePoolTemplate]) {
    if node
        .labels
        .get(labels::INITIALIZED)
        .is_some_and(|v| v == "true")
    {
        return;
    }
    let Some(template) = node
        .labels
        .get(labels::NODEPOOL)
        .and_then(|pool| templates.iter().find(|t| &t.name == pool))
    else {
        return;
    };
    node.taints.retain(|taint| {
        !template
            .startup_taints
            .iter()
            .any(|s| s.key == taint.key && s.value == taint.value && s.effect == taint.effect)
    });
}

/// A node that joined, with what its NodeClaim's nominated pods add.
fn joined_node(node: NodeInfo, extra: &Nominated) -> ExistingNode {
    let mut attached = node.attached;
    for volume in &extra.volumes {
        if !attached.contains(volume) {
            attached.push(volume.clone());
        }
    }
    let mut host_ports = node.host_ports;
    host_ports.extend(extra.host_ports.iter().cloned());
    let mut pods = node.pods;
    pods.extend(extra.pods.iter().cloned());
    let mut anti_affinity = node.anti_affinity;
    anti_affinity.extend(extra.anti_affinity.iter().cloned());
    // The kubelet labels every node with its hostname; one reported without is matched by
    // its name (rounds keep a pod off a node that refused it by this label).
    let mut labels = node.labels;
    labels
        .entry(crate::vocab::labels::HOSTNAME.to_owned())
        .or_insert_with(|| node.name.clone());
    ExistingNode {
        name: node.name,
        labels,
        taints: node.taints,
        allocatable: node.allocatable,
        requested: node.requested.add(&extra.requests),
        pods,
        anti_affinity,
        host_ports,
        attach_limits: node.attach_limits,
        attached,
    }
}

/// A launched NodeClaim whose node has not joined, as the node it will be; `None` before
/// it launched, or when its pool or instance type is not in this round.
fn launched_node(
    claim: &InFlight<'_>,
    extra: &Nominated,
    templates: &[NodePoolTemplate],
    daemonsets: &[Pod],
) -> Option<ExistingNode> {
    let instance = claim.instance?;
    let template = templates.iter().find(|t| t.name == claim.nodepool)?;
    let it = template
        .instance_types
        .iter()
        .find(|t| t.name == instance.instance_type)?;
    let mut node_labels = instance.node_labels(Some(it));
    node_labels.insert(labels::NODEPOOL.into(), claim.nodepool.to_owned());
    // Registration lays the NodeClaim's labels over the Node's; without them, the pool's
    // requirements give the labels any of its NodeClaims would carry.
    let claim_labels = claim
        .labels
        .cloned()
        .unwrap_or_else(|| template.requirements.node_labels());
    for (key, value) in claim_labels {
        node_labels.entry(key).or_insert(value);
    }
    let daemons: Vec<&Pod> = daemonsets
        .iter()
        .filter(|ds| ds.daemon_runs_on(&node_labels, &template.taints))
        .collect();
    let daemon = daemons
        .iter()
        .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests));
    let mut host_ports = extra.host_ports.clone();
    host_ports.extend(daemons.iter().flat_map(|ds| ds.host_ports.iter().cloned()));
    Some(ExistingNode {
        name: claim.name.to_owned(),
        labels: node_labels,
        taints: template.taints.clone(),
        allocatable: it.allocatable(),
        requested: daemon.add(&extra.requests),
        pods: extra.pods.clone(),
        anti_affinity: extra.anti_affinity.clone(),
        host_ports,
        // Not known until its node registers its CSINode; the limit is checked then.
        attach_limits: BTreeMap::new(),
        attached: extra.volumes.clone(),
    })
}

/// A short, stable NodeClaim name suffix from a seed, a round and an index (like upstream's
/// random one): five characters of upstream's alphabet.
pub fn suffix(seed: u64, round: u64, index: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = (round ^ seed)
        .wrapping_mul(1_000_003)
        .wrapping_add(index as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// The NodeClaims round `round` planned, named `<nodepool>-<suffix>`, each with the
/// requirements it launches under.
pub fn plans(
    result: &SchedulingResult,
    round: u64,
    seed: u64,
) -> Vec<(NodeClaimPlan, Requirements)> {
    result
        .new_claims
        .iter()
        .enumerate()
        .map(|(index, claim)| plan_of(claim, suffix(seed, round, index), round))
        .collect()
}

/// A planned NodeClaim named `<nodepool>-<suffix>`, counted as planned by `round`, with the
/// requirements it launches under.
pub fn plan_of(
    claim: &PlannedNodeClaim,
    suffix: String,
    round: u64,
) -> (NodeClaimPlan, Requirements) {
    let plan = NodeClaimPlan {
        nodeclaim: format!("{}-{suffix}", claim.nodepool),
        nodepool: claim.nodepool.clone(),
        round,
        pods: claim.pods.clone(),
        requests: claim.requests.to_quantity_map(),
        instance_types: claim.instance_types.clone(),
        min_values_relaxed: claim.min_values_relaxed,
    };
    let mut requirements = claim.requirements.clone();
    // What a round requires of the hostname is about running nodes (those refused to a pod
    // left to kube-scheduler, see `nominations`): a new node is none of them, and the API
    // server refuses the restricted label in a NodeClaim's requirements.
    requirements.remove(labels::HOSTNAME);
    (plan, requirements)
}

/// How a round went, beside its decisions.
#[derive(Debug, Clone)]
pub struct RoundRun {
    /// Its number.
    pub round: u64,
    /// Pods it considered.
    pub pods: usize,
    /// How long deciding took (for a repeat, taking the earlier round's decisions).
    pub duration_us: u64,
    /// Its input, recorded unless it repeats an earlier round's.
    pub input: Option<RoundInput>,
    /// The earlier round whose input and decisions it repeats.
    pub repeats: Option<u64>,
}

/// The journal's record of a round: its decisions, and its input for `journal verify`.
pub fn round_record(
    run: RoundRun,
    result: &SchedulingResult,
    nodeclaims: Vec<String>,
) -> RoundRecord {
    RoundRecord {
        round: run.round,
        pods: run.pods,
        bindings: result
            .bindings
            .iter()
            .map(|b| (b.pod.clone(), b.node.clone()))
            .collect(),
        nodeclaims,
        unschedulable: result
            .unschedulable
            .iter()
            .map(|u| (u.pod.clone(), u.reason.clone()))
            .collect(),
        duration_us: run.duration_us,
        input: run.input.map(Box::new),
        repeats: run.repeats,
    }
}

#[cfg(test)]
mod tests;
