//! Topology spread bookkeeping for one round: per constraint group (key, namespace,
//! selector), how many matching pods each domain holds, kept up to date as pods are placed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::api::labels;
use crate::model::pod::TopologySpread;
use crate::model::{Pod, Requirements};

use super::ExistingNode;

/// Identifies the pods a constraint counts.
type GroupKey = (String, String, Vec<(String, String)>);

fn group_key(spread: &TopologySpread, namespace: &str) -> GroupKey {
    (
        spread.topology_key.clone(),
        namespace.to_owned(),
        spread
            .selector
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Domain counts for every spread constraint of the round's pods.
pub(super) struct Topology {
    groups: HashMap<GroupKey, (TopologySpread, HashMap<String, i64>)>,
}

impl Topology {
    pub(super) fn new(pods: &[Pod], existing: &[ExistingNode]) -> Self {
        let mut topology = Topology {
            groups: HashMap::new(),
        };
        for pod in pods {
            for spread in &pod.spread {
                let key = group_key(spread, &pod.namespace);
                if topology.groups.contains_key(&key) {
                    continue;
                }
                let mut counts = HashMap::new();
                for node in existing {
                    let domain = existing_domain(node, &spread.topology_key);
                    let matching = node
                        .pods
                        .iter()
                        .filter(|(ns, l)| spread.counts(&pod.namespace, ns, l))
                        .count() as i64;
                    if let Some(domain) = domain
                        && matching > 0
                    {
                        *counts.entry(domain).or_insert(0) += matching;
                    }
                }
                topology.groups.insert(key, (spread.clone(), counts));
            }
        }
        topology
    }

    /// Count of matching pods in `domain` for `spread` of a pod in `namespace`.
    pub(super) fn count(&self, spread: &TopologySpread, namespace: &str, domain: &str) -> i64 {
        self.groups
            .get(&group_key(spread, namespace))
            .and_then(|(_, c)| c.get(domain).copied())
            .unwrap_or(0)
    }

    /// For a zone-like constraint: the domains the pod may go to, emptiest first, within
    /// `max_skew` of the emptiest of the pod's eligible domains (`universe`).
    pub(super) fn allowed_domains(
        &self,
        spread: &TopologySpread,
        namespace: &str,
        alternatives: &[Requirements],
        universe: &BTreeMap<String, BTreeSet<String>>,
    ) -> Vec<String> {
        let Some(universe) = universe.get(&spread.topology_key) else {
            return Vec::new();
        };
        let eligible: Vec<&String> = universe
            .iter()
            .filter(|d| {
                alternatives
                    .iter()
                    .any(|alt| alt.get(&spread.topology_key).is_none_or(|r| r.has(d)))
            })
            .collect();
        let Some(min) = eligible
            .iter()
            .map(|d| self.count(spread, namespace, d))
            .min()
        else {
            return Vec::new();
        };
        let mut allowed: Vec<(i64, &String)> = eligible
            .into_iter()
            .map(|d| (self.count(spread, namespace, d), d))
            .filter(|(count, _)| count + 1 - min <= spread.max_skew)
            .collect();
        allowed.sort();
        allowed.into_iter().map(|(_, d)| d.clone()).collect()
    }

    /// Records a pod placed where `domain_of(key)` tells its domains.
    pub(super) fn record(&mut self, pod: &Pod, domain_of: impl Fn(&str) -> Option<String>) {
        for ((_, namespace, _), (spread, counts)) in self.groups.iter_mut() {
            if spread.counts(namespace, &pod.namespace, &pod.labels)
                && let Some(domain) = domain_of(&spread.topology_key)
            {
                *counts.entry(domain).or_insert(0) += 1;
            }
        }
    }
}

/// The domain of an existing node (hostname domains are node names).
pub(super) fn existing_domain(node: &ExistingNode, key: &str) -> Option<String> {
    if key == labels::HOSTNAME {
        return Some(
            node.labels
                .get(key)
                .cloned()
                .unwrap_or_else(|| node.name.clone()),
        );
    }
    node.labels.get(key).cloned()
}

/// The domain of a planned NodeClaim: known when its requirements pin one value.
pub(super) fn claim_domain(
    requirements: &Requirements,
    claim_index: usize,
    key: &str,
) -> Option<String> {
    if key == labels::HOSTNAME {
        return Some(format!("nodeclaim#{claim_index}"));
    }
    let values = requirements.get(key)?.values()?;
    (values.len() == 1)
        .then(|| values.iter().next().cloned())
        .flatten()
}
