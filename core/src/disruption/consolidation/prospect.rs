//! Whether a single-node consolidation could save anything, told without a simulation.
//!
//! A simulation of removing one node is a scheduling round over the whole cluster; at a
//! fixed point most candidates fail it, and proving that for each one is most of what a pass
//! over a large cluster costs. [`Prospects`] first asks two necessary conditions, each
//! looser than the simulation, so a candidate it rules out is one the simulation would
//! refuse too:
//!
//! - a moved pod can land on an existing node only if some other node has its requests
//!   free, keeps the required hostname anti-affinity both ways (the pod's terms select no
//!   pod there, no term of a pod there selects it) and has fewer than `maxSkew` of the pods
//!   a required hostname spread of the pod counts (the round counts a new node's zero);
//!   requirements, taints, host ports, other topology and the other moved pods only take
//!   nodes away;
//! - the pods that land on no other node must all go to the one replacement, whose type
//!   must hold their summed requests (daemonsets only add to that) and cost strictly less
//!   than the candidate; the floor is the cheapest available offering of any NodePool's
//!   type that holds them (requirements, minValues and capacity-type rules only raise it),
//!   on-demand for a spot candidate while spot-to-spot consolidation is off (a replacement
//!   that could be spot is refused then).
//!
//! When the floor is not below the candidate's price no command can take it alone, and it
//! is reported unconsolidatable with that floor. A term whose namespaces depend on a
//! namespace selector is taken to select nothing, so a doubt never rules a node out.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::command::Unconsolidatable;
use crate::disruption::NodeSnapshot;
use crate::model::pod::{PodAffinityTerm, selector_matches};
use crate::model::{CapacityType, InstanceType, Pod, ResourceName, Resources};
use crate::scheduling::{ExistingNode, SchedulingInput};
use crate::vocab::labels;

/// An instance type some NodePool may launch.
struct Launchable {
    /// What it holds.
    holds: Resources,
    /// Its cheapest available offering ($/h).
    price: f64,
    /// Its cheapest available on-demand offering ($/h), infinite without one.
    on_demand: f64,
}

/// What the rest of the cluster has free, and what the NodePools could launch, for the
/// single-node candidates of one pass.
pub struct Prospects<'a> {
    /// The destination nodes with their free room, most free CPU first.
    free: Vec<(&'a ExistingNode, Resources)>,
    /// Whether a pod on some destination has a required hostname anti-affinity term.
    repelling: bool,
    /// The round the simulations start from.
    base: &'a SchedulingInput,
    /// The NodePools' types with an available offering, cheapest first (made when a
    /// candidate first needs new capacity).
    types: std::cell::OnceCell<Vec<Launchable>>,
    /// Whether a spot node may be replaced by a spot node.
    spot_to_spot: bool,
    /// For pods no anti-affinity concerns, per request shape: up to two nodes with room
    /// (so one can be the candidate).
    room: HashMap<Resources, [Option<usize>; 2]>,
}

impl<'a> Prospects<'a> {
    /// From the round the simulations start from, without the nodes on their way out.
    /// `spot_to_spot` is the feature gate: without it a spot candidate's replacement can
    /// only be on-demand.
    pub fn new(base: &'a SchedulingInput, leaving: &BTreeSet<String>, spot_to_spot: bool) -> Self {
        let mut free: Vec<(&ExistingNode, Resources)> = base
            .existing
            .iter()
            .filter(|n| !leaving.contains(&n.name))
            .map(|n| (&**n, n.allocatable.sub(&n.requested)))
            .collect();
        free.sort_by_key(|(n, room)| (std::cmp::Reverse(room.get(ResourceName::Cpu)), &n.name));
        let repelling = free
            .iter()
            .any(|(n, _)| n.anti_affinity.iter().any(|(_, t)| on_hostname(t)));
        Prospects {
            free,
            repelling,
            base,
            types: std::cell::OnceCell::new(),
            spot_to_spot,
            room: HashMap::new(),
        }
    }

    /// The NodePools' types with an available offering, cheapest first.
    fn types(&self) -> &[Launchable] {
        self.types.get_or_init(|| launchable(self.base))
    }

    /// Up to two destinations `pod` could land on, by the conditions above.
    fn landings(&mut self, pod: &Pod) -> [Option<usize>; 2] {
        let plain = !self.repelling
            && !pod.pod_affinity.iter().any(on_hostname)
            && !pod
                .spread
                .iter()
                .any(|s| s.topology_key == labels::HOSTNAME);
        if plain && let Some(found) = self.room.get(&pod.requests) {
            return *found;
        }
        let cpu = pod.requests.get(ResourceName::Cpu);
        let mut fits = self
            .free
            .iter()
            // Most free CPU first: past the first node without enough, none has it.
            .take_while(|(_, room)| room.get(ResourceName::Cpu) >= cpu)
            .enumerate()
            .filter(|(_, (node, room))| pod.requests.fits_in(room) && (plain || apart(pod, node)))
            .map(|(i, _)| i);
        let found = [fits.next(), fits.next()];
        if plain {
            self.room.insert(pod.requests, found);
        }
        found
    }

    /// The least $/h the new capacity of a command removing `candidate` alone could cost:
    /// zero when each of its pods could land on some other node.
    pub fn floor(&mut self, candidate: &NodeSnapshot) -> f64 {
        let own =
            |name: &str| candidate.node.as_deref() == Some(name) || candidate.nodeclaim == name;
        let mut homeless = Resources::ZERO;
        let mut any = false;
        for pod in candidate.reschedulable() {
            let elsewhere = self
                .landings(&pod.pod)
                .into_iter()
                .flatten()
                .any(|i| !own(&self.free[i].0.name));
            if !elsewhere {
                homeless = homeless.add(&pod.pod.requests);
                any = true;
            }
        }
        if !any {
            return 0.0;
        }
        let spot = candidate
            .offering
            .as_ref()
            .is_some_and(|o| o.capacity_type == CapacityType::Spot);
        let holding = self.types().iter().filter(|t| homeless.fits_in(&t.holds));
        if spot && !self.spot_to_spot {
            // A replacement that may be spot is refused; one that may not is on-demand.
            holding.map(|t| t.on_demand).min_by(f64::total_cmp)
        } else {
            holding.map(|t| t.price).next()
        }
        .unwrap_or(f64::INFINITY)
    }

    /// Of `candidates`, in order, those whose pods fit together on the free room of the
    /// nodes not taken, by requests and hostname anti-affinity with the pods already there,
    /// a pod spread or drawn over another key staying in its candidate's domain of it:
    /// each candidate's pods, largest first, go to the first node with room that is no
    /// candidate, else to one that is neither chosen nor the candidate itself; a candidate
    /// whose pods all fit is chosen (and the nodes that took them are no longer candidates),
    /// otherwise it stays. Not a proof — the simulation decides — but a set the simulation
    /// can mostly take, where every candidate at once is more than the rest of the cluster
    /// can hold.
    pub fn packable<'n>(&self, candidates: &[&'n NodeSnapshot]) -> Vec<&'n NodeSnapshot> {
        let mut room: Vec<Resources> = self.free.iter().map(|(_, r)| *r).collect();
        let position: HashMap<&str, usize> = self
            .free
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.name.as_str(), i))
            .collect();
        let at = |c: &NodeSnapshot| {
            c.node
                .as_deref()
                .and_then(|n| position.get(n))
                .or_else(|| position.get(c.nodeclaim.as_str()))
                .copied()
        };
        // Per node position: chosen to go, or kept because it takes pods.
        let mut going = vec![false; room.len()];
        let mut taking = vec![false; room.len()];
        let mut in_set = vec![false; room.len()];
        for i in candidates.iter().filter_map(|c| at(c)) {
            in_set[i] = true;
        }
        let mut chosen = Vec::new();
        for candidate in candidates {
            let Some(own) = at(candidate) else { continue };
            if taking[own] {
                continue;
            }
            let mut pods: Vec<&Pod> = candidate.reschedulable().map(|p| &p.pod).collect();
            pods.sort_by_key(|p| std::cmp::Reverse(p.requests.get(ResourceName::Cpu)));
            let mut placed: Vec<(usize, Resources)> = Vec::new();
            let home = &self.free[own].0.labels;
            let fits = pods.iter().all(|pod| {
                // A pod spread or drawn over zones (or any key but hostname) stays in its
                // candidate's domain, where moving it changes no count.
                let keys: Vec<&str> = pod
                    .spread
                    .iter()
                    .filter(|s| !s.schedule_anyway)
                    .map(|s| s.topology_key.as_str())
                    .chain(
                        pod.pod_affinity
                            .iter()
                            .filter(|t| !t.anti)
                            .map(|t| t.topology_key.as_str()),
                    )
                    .filter(|k| *k != labels::HOSTNAME)
                    .collect();
                let fits = |i: &usize| {
                    let node = self.free[*i].0;
                    *i != own
                        && !going[*i]
                        && pod.requests.fits_in(&room[*i])
                        && keys.iter().all(|k| node.labels.get(*k) == home.get(*k))
                        && apart(pod, node)
                };
                // Nodes that are no candidate first, so candidates stay free to go.
                let found = (0..room.len())
                    .filter(|i| !in_set[*i])
                    .find(&fits)
                    .or_else(|| (0..room.len()).find(&fits));
                if let Some(i) = found {
                    room[i] = room[i].sub(&pod.requests);
                    placed.push((i, pod.requests));
                }
                found.is_some()
            });
            if fits {
                going[own] = true;
                for (i, _) in &placed {
                    taking[*i] = true;
                }
                chosen.push(*candidate);
            } else {
                for (i, requests) in placed {
                    room[i] = room[i].add(&requests);
                }
            }
        }
        chosen
    }

    /// Why no command can take `candidate` alone, when these conditions already tell.
    pub fn hopeless(&mut self, candidate: &NodeSnapshot) -> Option<Unconsolidatable> {
        let floor = self.floor(candidate);
        (floor >= candidate.price).then_some(Unconsolidatable::NoCheaperRoom {
            floor,
            price: candidate.price,
        })
    }
}

/// A required anti-affinity term over single nodes.
fn on_hostname(term: &PodAffinityTerm) -> bool {
    term.anti && term.topology_key == labels::HOSTNAME
}

/// Whether `pod` may share `node` as far as required hostname anti-affinity goes, both ways,
/// and its required hostname spreads (a node with `maxSkew` pods a spread counts already is
/// full for it: a new node would hold none).
fn apart(pod: &Pod, node: &ExistingNode) -> bool {
    let crowded = pod
        .spread
        .iter()
        .filter(|s| s.topology_key == labels::HOSTNAME && !s.schedule_anyway)
        .any(|s| {
            let counted = node
                .pods
                .iter()
                .filter(|(ns, labels)| {
                    *ns == pod.namespace && selector_matches(&s.selector, &s.expressions, labels)
                })
                .count();
            i64::try_from(counted).unwrap_or(i64::MAX) >= s.max_skew
        });
    if crowded {
        return false;
    }
    let repels = pod.pod_affinity.iter().filter(|t| on_hostname(t)).any(|t| {
        node.pods
            .iter()
            .any(|(ns, labels)| selects(t, &pod.namespace, ns, labels))
    });
    let repelled = node
        .anti_affinity
        .iter()
        .filter(|(_, t)| on_hostname(t))
        .any(|(owner, t)| selects(t, owner, &pod.namespace, &pod.labels));
    !repels && !repelled
}

/// Whether `term` of a pod in `owner`'s namespace certainly selects a pod in `namespace`
/// with `labels` (a namespace selector's namespaces are not known here: not certain).
fn selects(
    term: &PodAffinityTerm,
    owner: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let in_namespace = term.all_namespaces
        || term.namespaces.iter().any(|n| n == namespace)
        || term.namespaces.is_empty() && term.namespace_selector.is_none() && owner == namespace;
    in_namespace && selector_matches(&term.selector, &term.expressions, labels)
}

/// `base`'s NodePools' types with an available offering, cheapest first.
fn launchable(base: &SchedulingInput) -> Vec<Launchable> {
    let cheapest = |t: &InstanceType, on_demand: bool| {
        t.offerings
            .iter()
            .filter(|o| o.available && (!on_demand || o.capacity_type == CapacityType::OnDemand))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .unwrap_or(f64::INFINITY)
    };
    let mut types: Vec<Launchable> = base
        .nodepools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .map(|t| Launchable {
            holds: t.allocatable(),
            price: cheapest(t, false),
            on_demand: cheapest(t, true),
        })
        .filter(|t| t.price.is_finite())
        .collect();
    types.sort_by(|a, b| a.price.total_cmp(&b.price));
    types
}

#[cfg(test)]
mod tests;
