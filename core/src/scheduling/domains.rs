//! Domains (zones, capacity types, any node label but hostname) for one round: which keys
//! the round's constraints refer to, the domains each NodePool's new nodes could have and the
//! existing nodes have, where an attempt may go and which domains its spreads count; and the
//! per-node (hostname) rules of a pod.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::pod::TopologySpread;
use crate::model::taints::untolerated;
use crate::model::{Pod, Requirements};
use crate::vocab::labels;

use super::pools::{KeyDomains, PoolState};
use super::topology::{Domain, KeyRef, Topology};
use super::{NodePoolTemplate, SchedulingInput};

/// Values per key.
pub(super) type Domains = BTreeMap<String, BTreeSet<String>>;

/// The domains the round knows of: the keys its pods and nodes refer to, each NodePool's
/// and, remembered per pod shape, the existing nodes'.
#[derive(Clone)]
pub(super) struct RoundDomains {
    pub(super) keys: BTreeSet<String>,
    pub(super) pools: Vec<PoolDomains>,
    pub(super) nodes: NodeDomains,
}

/// One attempt's pod as the domain computations see it.
pub(super) struct Want<'p> {
    /// The pod as this attempt constrains it.
    pub(super) pod: &'p Pod,
    /// The pod as the round's input states it (what its spreads count by).
    pub(super) required: &'p Pod,
    /// The attempt's requirement alternatives.
    pub(super) base: &'p [Requirements],
    /// Its spread constraints.
    pub(super) constraints: &'p [&'p TopologySpread],
    /// Per NodePool, whether the attempt tolerates its taints.
    pub(super) tolerated: &'p [bool],
}

impl RoundDomains {
    pub(super) fn new(input: &SchedulingInput, pool_states: &[PoolState]) -> Self {
        let keys = domain_keys(input);
        let pools = pool_domains(input, pool_states, &keys);
        RoundDomains {
            keys,
            pools,
            nodes: NodeDomains::default(),
        }
    }

    /// Where the attempt could go, and per spread the domains its policies count; nothing
    /// (and no spread counted) when neither the pod's constraints nor other pods' (`others`:
    /// their anti-affinity repels it, or their affinity follows it) are at domain level.
    pub(super) fn reach(
        &mut self,
        input: &SchedulingInput,
        want: &Want<'_>,
        others: bool,
    ) -> (Domains, Vec<Domains>) {
        let Want {
            pod,
            required,
            base,
            constraints,
            tolerated,
        } = *want;
        let domain_level = |key: &str| key != labels::HOSTNAME;
        if !(constraints.iter().any(|c| domain_level(&c.topology_key))
            || pod
                .pod_affinity
                .iter()
                .any(|t| domain_level(&t.topology_key))
            || others)
        {
            return (Domains::new(), Vec::new());
        }
        let RoundDomains {
            keys: domain_keys,
            pools: pool_domains,
            nodes: node_domains,
        } = self;
        let creatable = pool_universe(input, pool_domains, base, pod.needs_exotic(), tolerated);
        // A spread counts the domains of the pod's required constraints: a preferred node
        // affinity tried as a requirement narrows where this attempt may go, not the domains
        // whose minimum the skew is taken against (kube-scheduler counts nodes by the
        // required node affinity only).
        let counted_creatable =
            if std::ptr::eq(pod, required) || pod.node_selector == required.node_selector {
                creatable.clone()
            } else {
                pool_universe(
                    input,
                    pool_domains,
                    &required.requirement_alternatives(),
                    pod.needs_exotic(),
                    tolerated,
                )
            };
        // Volumes decide where the pod may go, not which nodes a spread counts.
        let node_affinity = required.node_affinity_alternatives();
        let mut with_nodes =
            |creatable: &Domains, alternatives: &[Requirements], policy: NodePolicy| {
                let mut domains = creatable.clone();
                let of_nodes = node_domains.of(input, domain_keys, alternatives, pod, policy);
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
            base,
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
    }
}

/// The domains an attempt to place a pod works with.
pub(super) struct Reach<'a> {
    /// The domains the pod could go to.
    pub(super) reachable: &'a Domains,
    /// Per spread constraint, the domains its policies count.
    pub(super) counted: &'a [Domains],
    /// Per key, the domains other pods' anti-affinity keeps it out of.
    pub(super) repelled: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
    /// Keys the pod is pinned to one domain of (others' affinity follows it).
    pub(super) pinned: &'a [String],
}

/// The combinations of domains (zone, capacity type or any other key but hostname) a pod's
/// spread constraints and pod (anti-)affinity allow within `reach`, emptiest first. One
/// empty combination when it has no such constraint; none when nothing is allowed.
pub(super) fn domain_choices<'a>(
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
        let count_key = KeyRef::affinity(term, &pod.namespace);
        let eligible: Vec<String> = reachable_for(key)
            .iter()
            .filter(|d| base.iter().any(|alt| alt.get(key).is_none_or(|r| r.has(d))))
            .cloned()
            .collect();
        let occupied = topology.occupied(count_key);
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
    combinations(per_key)
}

/// Every combination of one domain per key, in key order, then domain order.
fn combinations(per_key: BTreeMap<&str, Vec<String>>) -> Vec<Vec<(String, String)>> {
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
pub(super) struct HostnameRules {
    pub(super) spread: Vec<(Option<usize>, i64)>,
    pub(super) anti: Vec<Option<usize>>,
    pub(super) affinity: Vec<Option<usize>>,
    /// The pod matches its own hostname affinity and no matching pod exists yet.
    pub(super) first_of_group: bool,
}

impl HostnameRules {
    pub(super) fn new(pod: &Pod, spreads: &[&TopologySpread], topology: &Topology) -> Self {
        let hostname_terms = || {
            pod.pod_affinity
                .iter()
                .filter(|t| t.topology_key == labels::HOSTNAME)
        };
        let affinity_keys: Vec<KeyRef<'_>> = hostname_terms()
            .filter(|t| !t.anti)
            .map(|t| KeyRef::affinity(t, &pod.namespace))
            .collect();
        HostnameRules {
            spread: spreads
                .iter()
                .filter(|c| c.topology_key == labels::HOSTNAME)
                .map(|c| {
                    (
                        topology.group(KeyRef::spread(c, &pod.namespace)),
                        c.max_skew,
                    )
                })
                .collect(),
            anti: hostname_terms()
                .filter(|t| t.anti)
                .map(|t| topology.group(KeyRef::affinity(t, &pod.namespace)))
                .collect(),
            affinity: affinity_keys.iter().map(|k| topology.group(*k)).collect(),
            first_of_group: affinity_keys
                .iter()
                .all(|k| !topology.any(*k) && k.matches(&pod.namespace, &pod.labels)),
        }
    }

    /// No per-node rules at all.
    pub(super) fn is_empty(&self) -> bool {
        self.spread.is_empty() && self.anti.is_empty() && self.affinity.is_empty()
    }

    /// Whether the pod may join the node (or planned NodeClaim) `domain`.
    pub(super) fn allows(&self, topology: &Topology, domain: &Domain) -> bool {
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
    pub(super) fn excludes_every_claim(&self, topology: &Topology, claims: usize) -> bool {
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
    pub(super) fn allows_new_node(&self) -> bool {
        self.affinity.is_empty() || self.first_of_group
    }
}

/// The topology keys (other than hostname, whose domains are nodes) that the round's pods
/// and the existing nodes' anti-affinity refer to.
pub(super) fn domain_keys(input: &SchedulingInput) -> BTreeSet<String> {
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
#[derive(Default, Clone)]
pub(super) struct PoolDomains {
    pub(super) ordinary: Domains,
    pub(super) all: Domains,
}

/// Per NodePool, its [`PoolDomains`]. Zones and capacity types come from the offerings;
/// other keys from instance type labels, or the pool's own requirements where a type does
/// not carry the label (its template labels). Each key's are worked out once per catalog.
pub(super) fn pool_domains(
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
            for key in keys {
                let of_key = state.catalog.domains(key, || key_domains(pool, state, key));
                if !of_key.ordinary.is_empty() {
                    out.ordinary.insert(key.clone(), of_key.ordinary.clone());
                }
                if !of_key.all.is_empty() {
                    out.all.insert(key.clone(), of_key.all.clone());
                }
            }
            out
        })
        .collect()
}

/// The values of `key` the new nodes of `pool` (whose state is `state`) could have.
fn key_domains(pool: &NodePoolTemplate, state: &PoolState, key: &str) -> KeyDomains {
    let mut out = KeyDomains::default();
    for i in state.types.iter() {
        let it = &pool.instance_types[*i];
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
        } else if let Some(pinned) = pool.requirements.get(key).and_then(|r| r.values()) {
            values.extend(pinned.iter().cloned());
        }
        if !state.exotic[*i] {
            out.ordinary.extend(values.iter().cloned());
        }
        out.all.extend(values);
    }
    out
}

/// The domains of the NodePools a pod could have a node made in: taints `tolerated`,
/// requirements compatible with one of its `alternatives`, and only the values those accept.
/// A pool the pod cannot use adds no domain until one of its nodes exists (upstream counts
/// every pool's domains, so one tainted or unrelated pool in an extra zone holds every
/// zone-spread workload back).
pub(super) fn pool_universe(
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
pub(super) struct NodePolicy {
    /// Only nodes the pod's node selector and affinity accept (nodeAffinityPolicy Honor).
    pub(super) honor_affinity: bool,
    /// Only nodes whose taints the pod tolerates (nodeTaintsPolicy Honor).
    pub(super) honor_taints: bool,
}

/// The domains of the existing nodes a policy counts, remembered per pod shape (node
/// requirements, and tolerations where they matter): the pods of one workload ask alike, and
/// scanning every node for each would make a round quadratic.
#[derive(Default, Clone)]
pub(super) struct NodeDomains {
    pub(super) known: HashMap<NodeDomainsKey, Domains>,
    pub(super) none: Domains,
}

/// Requirement alternatives, whether node affinity filters, and the tolerations when taints do.
pub(super) type NodeDomainsKey = (
    Vec<Requirements>,
    bool,
    Option<Vec<crate::model::Toleration>>,
);

impl NodeDomains {
    pub(super) fn of(
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
pub(super) fn add_node_domains(
    out: &mut Domains,
    input: &SchedulingInput,
    keys: &BTreeSet<String>,
    alternatives: &[Requirements],
    pod: &Pod,
    policy: NodePolicy,
) {
    for node in &input.existing {
        if (policy.honor_taints && untolerated(&node.taints, &pod.tolerations).is_some())
            || (policy.honor_affinity && !alternatives.iter().any(|alt| alt.admits(&node.labels)))
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
