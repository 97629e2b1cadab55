//! Topology spread bookkeeping for one round: per constraint group (key, namespace,
//! selector), how many matching pods each domain holds, kept up to date as pods are placed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;

use crate::model::pod::{PodAffinityTerm, SelectorExpression, TopologySpread, selector_matches};
use crate::model::{Pod, Requirements};
use crate::vocab::labels;

use super::ExistingNode;

/// Identifies the pods a constraint counts: a topology key and a pod selector (namespaces
/// and labels). Its namespaces are sorted and deduplicated, so equal keys compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CountKey {
    pub(super) topology_key: String,
    /// Namespaces counted; `None` for every namespace.
    namespaces: Option<Vec<String>>,
    selector: BTreeMap<String, String>,
    expressions: Vec<SelectorExpression>,
}

impl CountKey {
    /// The pods a pod-affinity term of a pod in `namespace` refers to.
    pub(super) fn affinity(term: &PodAffinityTerm, namespace: &str) -> Self {
        KeyRef::affinity(term, namespace).to_owned()
    }

    /// Whether a pod in `namespace` with `labels` is counted.
    pub(super) fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.view().matches(namespace, labels)
    }

    fn view(&self) -> KeyRef<'_> {
        KeyRef {
            topology_key: &self.topology_key,
            namespaces: match &self.namespaces {
                None => Namespaces::All,
                Some(listed) => Namespaces::Listed(listed),
            },
            selector: &self.selector,
            expressions: &self.expressions,
        }
    }
}

/// A [`CountKey`] borrowed from the constraint naming it: a round looks groups up for every
/// pod it places and moves, and building an owned key copied the selector each time.
#[derive(Clone, Copy)]
pub(super) struct KeyRef<'a> {
    topology_key: &'a str,
    namespaces: Namespaces<'a>,
    selector: &'a BTreeMap<String, String>,
    expressions: &'a [SelectorExpression],
}

/// The namespaces a key counts, as its constraint lists them (in any order, repeats
/// allowed: two keys are equal when they name the same set).
#[derive(Clone, Copy)]
enum Namespaces<'a> {
    All,
    One(&'a str),
    Listed(&'a [String]),
}

impl<'a> Namespaces<'a> {
    fn contains(self, namespace: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::One(one) => one == namespace,
            Namespaces::Listed(listed) => listed.iter().any(|n| n == namespace),
        }
    }

    /// The namespaces named (none for [`Namespaces::All`]).
    fn named(self) -> impl Iterator<Item = &'a str> {
        let (one, listed): (Option<&str>, &[String]) = match self {
            Namespaces::All => (None, &[]),
            Namespaces::One(one) => (Some(one), &[]),
            Namespaces::Listed(listed) => (None, listed),
        };
        one.into_iter().chain(listed.iter().map(String::as_str))
    }

    fn same(self, other: Namespaces<'_>) -> bool {
        match (self, other) {
            (Namespaces::All, Namespaces::All) => true,
            (Namespaces::All, _) | (_, Namespaces::All) => false,
            _ => self.named().all(|n| other.contains(n)) && other.named().all(|n| self.contains(n)),
        }
    }
}

impl<'a> KeyRef<'a> {
    /// The pods a spread constraint of a pod in `namespace` counts.
    pub(super) fn spread(spread: &'a TopologySpread, namespace: &'a str) -> Self {
        KeyRef {
            topology_key: &spread.topology_key,
            namespaces: Namespaces::One(namespace),
            selector: &spread.selector,
            expressions: &spread.expressions,
        }
    }

    /// The pods a pod-affinity term of a pod in `namespace` refers to.
    pub(super) fn affinity(term: &'a PodAffinityTerm, namespace: &'a str) -> Self {
        // With a namespace selector (resolved before the round) the list stands as it is,
        // even empty; without one, an empty list means the pod's own namespace.
        let namespaces = if term.all_namespaces {
            Namespaces::All
        } else if term.namespaces.is_empty() && term.namespace_selector.is_none() {
            Namespaces::One(namespace)
        } else {
            Namespaces::Listed(&term.namespaces)
        };
        KeyRef {
            topology_key: &term.topology_key,
            namespaces,
            selector: &term.selector,
            expressions: &term.expressions,
        }
    }

    /// Whether a pod in `namespace` with `labels` is counted.
    pub(super) fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace)
            && selector_matches(self.selector, self.expressions, labels)
    }

    fn to_owned(self) -> CountKey {
        let namespaces = match self.namespaces {
            Namespaces::All => None,
            named => {
                let mut named: Vec<String> = named.named().map(str::to_owned).collect();
                named.sort();
                named.dedup();
                Some(named)
            }
        };
        CountKey {
            topology_key: self.topology_key.to_owned(),
            namespaces,
            selector: self.selector.clone(),
            expressions: self.expressions.to_vec(),
        }
    }

    /// A hash equal for equal keys (namespaces left out: they may be listed in any order).
    fn hash(&self) -> u64 {
        use std::hash::BuildHasher;
        FixedState::default().hash_one((
            self.topology_key,
            matches!(self.namespaces, Namespaces::All),
            self.selector,
            self.expressions,
        ))
    }
}

impl PartialEq for KeyRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.topology_key == other.topology_key
            && self.selector == other.selector
            && self.expressions == other.expressions
            && self.namespaces.same(other.namespaces)
    }
}

/// The existing nodes' pods by label, so counting the pods a selector matches looks only at
/// those carrying one of its labels: `(key, value)` to `(node, pod)` positions, in node
/// order. (Counting by scanning every pod for every group made a round over a large cluster
/// with many anti-affinity terms quadratic.)
/// Built when a group first needs it: most rounds a disruption pass simulates count no pods.
pub(super) struct PodIndex<'a> {
    existing: &'a [Arc<ExistingNode>],
    by_label: std::cell::OnceCell<ByLabel<'a>>,
}

/// Per label key, the positions by value.
type ByLabel<'a> = HashMap<&'a str, ByValue<'a>, FixedState>;

/// Per label value, the `(node, pod)` positions carrying it.
type ByValue<'a> = HashMap<&'a str, Vec<(usize, usize)>, FixedState>;

impl<'a> PodIndex<'a> {
    fn new(existing: &'a [Arc<ExistingNode>]) -> Self {
        PodIndex {
            existing,
            by_label: std::cell::OnceCell::new(),
        }
    }

    fn build(existing: &'a [Arc<ExistingNode>]) -> ByLabel<'a> {
        let mut by_label = ByLabel::default();
        for (n, node) in existing.iter().enumerate() {
            for (p, (_, labels)) in node.pods.iter().enumerate() {
                for (k, v) in labels {
                    by_label
                        .entry(k.as_str())
                        .or_default()
                        .entry(v.as_str())
                        .or_default()
                        .push((n, p));
                }
            }
        }
        by_label
    }

    fn with(&self, key: &str, value: &str) -> &[(usize, usize)] {
        self.by_label
            .get_or_init(|| Self::build(self.existing))
            .get(key)
            .and_then(|values| values.get(value))
            .map_or(&[], Vec::as_slice)
    }
}

/// A topology domain: a label value (a zone, a node name) or a NodeClaim planned this round
/// (numbered, so checking one allocates nothing).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Domain {
    Named(String),
    Claim(usize),
}

/// How many matching pods each domain of one count key holds; planned NodeClaims by index,
/// since they are checked for every pod.
#[derive(Default, Clone)]
struct Counts {
    named: HashMap<String, i64>,
    claims: Vec<i64>,
    /// Planned NodeClaims holding at least one matching pod.
    occupied_claims: usize,
}

impl Counts {
    fn get(&self, domain: &Domain) -> i64 {
        match domain {
            Domain::Named(name) => self.named.get(name).copied().unwrap_or(0),
            Domain::Claim(i) => self.claims.get(*i).copied().unwrap_or(0),
        }
    }

    fn add(&mut self, domain: Domain, n: i64) {
        match domain {
            Domain::Named(name) => *self.named.entry(name).or_insert(0) += n,
            Domain::Claim(i) => {
                if self.claims.len() <= i {
                    self.claims.resize(i + 1, 0);
                }
                let before = self.claims[i];
                self.claims[i] += n;
                match (before > 0, self.claims[i] > 0) {
                    (false, true) => self.occupied_claims += 1,
                    (true, false) => self.occupied_claims -= 1,
                    _ => {}
                }
            }
        }
    }
}

/// Per node (or planned NodeClaim), the hostname anti-affinity groups of the pods on it:
/// a pod any of them selects may not join (kube-scheduler checks both directions).
#[derive(Default, Clone)]
struct Repelling {
    named: HashMap<String, Vec<usize>>,
    claims: Vec<Vec<usize>>,
}

impl Repelling {
    fn at(&self, domain: &Domain) -> &[usize] {
        match domain {
            Domain::Named(name) => self.named.get(name).map_or(&[], Vec::as_slice),
            Domain::Claim(i) => self.claims.get(*i).map_or(&[], Vec::as_slice),
        }
    }

    fn at_mut(&mut self, domain: Domain) -> &mut Vec<usize> {
        match domain {
            Domain::Named(name) => self.named.entry(name).or_default(),
            Domain::Claim(i) => {
                if self.claims.len() <= i {
                    self.claims.resize_with(i + 1, Vec::new);
                }
                &mut self.claims[i]
            }
        }
    }
}

/// Per count key, how many matching pods each domain holds.
#[derive(Clone)]
pub(super) struct Topology {
    groups: Vec<(CountKey, Counts)>,
    repelling: Repelling,
    /// Per (topology key, domain) other than hostname: the anti-affinity groups of the pods
    /// there, which keep the pods they select out of the whole domain.
    domain_repelling: BTreeMap<(String, String), Vec<usize>>,
    /// Groups some pod's required hostname pod affinity refers to.
    hostname_affinity: Vec<usize>,
    /// Distinct topology keys of the groups, hostname aside.
    domain_keys: BTreeSet<String>,
    /// The groups by [`KeyRef::hash`] of their keys.
    index: hashbrown::HashTable<usize>,
    /// Which groups count each pod of the round.
    members: Arc<Members>,
}

/// Per pod of a round, the groups that count it, worked out once per distinct namespace and
/// label set: placing and moving pods asks whether a group counts a pod for every node
/// looked at, and a round's pods mostly share a few label sets.
#[derive(Default)]
struct Members {
    /// Per pod (by position in the round), its label set's position in `groups`.
    class_of: Vec<u32>,
    /// Per label set, the groups counting its pods, in ascending order.
    groups: Vec<Box<[u32]>>,
}

impl Members {
    /// The groups counting `pods`, among `groups` (a round has fewer than 2³² of either).
    fn new(pods: &[Pod], groups: &[(CountKey, Counts)]) -> Self {
        let mut classes: HashMap<(&str, &BTreeMap<String, String>), u32, FixedState> =
            HashMap::default();
        let mut members = Members::default();
        for pod in pods {
            let next = members.groups.len() as u32;
            let class = *classes
                .entry((pod.namespace.as_str(), &pod.labels))
                .or_insert(next);
            if class == next {
                let counting: Vec<u32> = (0..groups.len())
                    .filter(|g| groups[*g].0.matches(&pod.namespace, &pod.labels))
                    .map(|g| g as u32)
                    .collect();
                members.groups.push(counting.into_boxed_slice());
            }
            members.class_of.push(class);
        }
        members
    }

    /// The groups counting pod `pod`.
    fn of(&self, pod: usize) -> &[u32] {
        &self.groups[self.class_of[pod] as usize]
    }

    /// Whether `group` counts pod `pod`.
    fn counts(&self, group: usize, pod: usize) -> bool {
        self.of(pod).binary_search(&(group as u32)).is_ok()
    }
}

impl Topology {
    /// Groups for every constraint of `pods` (their preferences too when `preferences`)
    /// and for the existing nodes' anti-affinity, counting the existing nodes' pods.
    pub(super) fn new(pods: &[Pod], existing: &[Arc<ExistingNode>], preferences: bool) -> Self {
        let mut topology = Topology {
            groups: Vec::new(),
            repelling: Repelling::default(),
            domain_repelling: BTreeMap::new(),
            hostname_affinity: Vec::new(),
            domain_keys: BTreeSet::new(),
            index: hashbrown::HashTable::new(),
            members: Arc::default(),
        };
        let pods_by_label = PodIndex::new(existing);
        for pod in pods {
            let keys = pod
                .spread
                .iter()
                .map(|s| KeyRef::spread(s, &pod.namespace))
                .chain(
                    pod.pod_affinity
                        .iter()
                        .chain(preferred_terms(pod, preferences))
                        .map(|t| KeyRef::affinity(t, &pod.namespace)),
                );
            for key in keys {
                topology.ensure_group(key, existing, &pods_by_label);
            }
            let terms = pod
                .pod_affinity
                .iter()
                .chain(preferred_terms(pod, preferences));
            for term in terms {
                if !term.anti
                    && term.topology_key == labels::HOSTNAME
                    && let Some(group) = topology.group(KeyRef::affinity(term, &pod.namespace))
                    && !topology.hostname_affinity.contains(&group)
                {
                    topology.hostname_affinity.push(group);
                }
            }
        }
        for node in existing {
            for (namespace, term) in &node.anti_affinity {
                let group = topology.ensure_group(
                    KeyRef::affinity(term, namespace),
                    existing,
                    &pods_by_label,
                );
                match existing_domain(node, &term.topology_key) {
                    Some(domain) if term.topology_key == labels::HOSTNAME => {
                        topology.repelling.at_mut(domain).push(group);
                    }
                    Some(Domain::Named(domain)) => topology
                        .domain_repelling
                        .entry((term.topology_key.clone(), domain))
                        .or_default()
                        .push(group),
                    _ => {}
                }
            }
        }
        topology.members = Arc::new(Members::new(pods, &topology.groups));
        topology
    }

    /// The group of `key`, created (counting the existing nodes' pods) if new.
    fn ensure_group(
        &mut self,
        key: KeyRef<'_>,
        existing: &[Arc<ExistingNode>],
        pods_by_label: &PodIndex<'_>,
    ) -> usize {
        if let Some(group) = self.group(key) {
            return group;
        }
        let mut counts = Counts::default();
        let mut count = |node: &ExistingNode, matching: i64| {
            if matching > 0
                && let Some(domain) = existing_domain(node, key.topology_key)
            {
                counts.add(domain, matching);
            }
        };
        match key.selector.iter().next() {
            // Only pods carrying the selector's first label can match: look at those.
            Some((label, value)) => {
                let mut current: Option<(usize, i64)> = None;
                for &(n, p) in pods_by_label.with(label, value) {
                    let (ns, l) = &existing[n].pods[p];
                    if !key.matches(ns, l) {
                        continue;
                    }
                    match &mut current {
                        Some((node, matching)) if *node == n => *matching += 1,
                        _ => {
                            if let Some((node, matching)) = current.take() {
                                count(&existing[node], matching);
                            }
                            current = Some((n, 1));
                        }
                    }
                }
                if let Some((node, matching)) = current {
                    count(&existing[node], matching);
                }
            }
            None => {
                for node in existing {
                    let matching = node
                        .pods
                        .iter()
                        .filter(|(ns, l)| key.matches(ns, l))
                        .count() as i64;
                    count(node, matching);
                }
            }
        }
        if key.topology_key != labels::HOSTNAME {
            self.domain_keys.insert(key.topology_key.to_owned());
        }
        let (group, groups) = (self.groups.len(), &self.groups);
        self.index
            .insert_unique(key.hash(), group, |g| groups[*g].0.view().hash());
        self.groups.push((key.to_owned(), counts));
        group
    }

    /// Whether a pod on the node (or planned NodeClaim) `domain` has a required hostname
    /// anti-affinity term selecting pod `pod` (by position in the round).
    pub(super) fn repels(&self, domain: &Domain, pod: usize) -> bool {
        self.repelling
            .at(domain)
            .iter()
            .any(|g| self.members.counts(*g, pod))
    }

    /// Whether any node (not planned NodeClaim) holds a pod with hostname anti-affinity.
    pub(super) fn repels_on_nodes(&self) -> bool {
        !self.repelling.named.is_empty()
    }

    /// The groups of a pod's required hostname anti-affinity terms.
    fn hostname_anti_groups<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = usize> + 'a {
        pod.pod_affinity
            .iter()
            .filter(|t| t.anti && t.topology_key == labels::HOSTNAME)
            .filter_map(|t| self.group(KeyRef::affinity(t, &pod.namespace)))
    }

    /// Whether pod `pod` is one some pod's required hostname affinity refers to.
    pub(super) fn matches_hostname_affinity(&self, pod: usize) -> bool {
        self.hostname_affinity
            .iter()
            .any(|g| self.members.counts(*g, pod))
    }

    /// The topology keys of the groups other than hostname (zone, capacity type, …).
    pub(super) fn domain_keys(&self) -> impl Iterator<Item = &str> {
        self.domain_keys.iter().map(String::as_str)
    }

    /// Whether pod `pod` is counted by any zone-level (not hostname) group.
    pub(super) fn matches_zone_level_group(&self, pod: usize) -> bool {
        self.members
            .of(pod)
            .iter()
            .any(|g| self.groups[*g as usize].0.topology_key != labels::HOSTNAME)
    }

    /// Whether `group` counts pod `pod`.
    pub(super) fn group_matches(&self, group: Option<usize>, pod: usize) -> bool {
        group.is_some_and(|g| self.members.counts(g, pod))
    }

    /// Moves the hostname-level counts of pod `pod` (by position in `pods`, the round's),
    /// and the anti-affinity it carries, from one planned NodeClaim to another.
    pub(super) fn move_between_claims(&mut self, pods: &[Pod], pod: usize, from: usize, to: usize) {
        for g in self.members.of(pod) {
            let (key, counts) = &mut self.groups[*g as usize];
            if key.topology_key == labels::HOSTNAME {
                counts.add(Domain::Claim(from), -1);
                counts.add(Domain::Claim(to), 1);
            }
        }
        let carried: Vec<usize> = self.hostname_anti_groups(&pods[pod]).collect();
        for group in carried {
            let source = self.repelling.at_mut(Domain::Claim(from));
            if let Some(at) = source.iter().position(|g| *g == group) {
                source.swap_remove(at);
            }
            self.repelling.at_mut(Domain::Claim(to)).push(group);
        }
    }

    /// The group of `key` (every constraint of the round's pods has one).
    pub(super) fn group(&self, key: KeyRef<'_>) -> Option<usize> {
        self.index
            .find(key.hash(), |g| self.groups[*g].0.view() == key)
            .copied()
    }

    /// Matching pods of `group` in `domain`.
    pub(super) fn count_in(&self, group: Option<usize>, domain: &Domain) -> i64 {
        group
            .and_then(|g| self.groups.get(g))
            .map_or(0, |(_, c)| c.get(domain))
    }

    /// How many planned NodeClaims hold at least one matching pod of `group`.
    pub(super) fn occupied_claims(&self, group: Option<usize>) -> usize {
        group
            .and_then(|g| self.groups.get(g))
            .map_or(0, |(_, c)| c.occupied_claims)
    }

    /// Named domains holding at least one matching pod.
    pub(super) fn occupied(&self, key: KeyRef<'_>) -> BTreeSet<String> {
        self.group(key)
            .and_then(|g| self.groups.get(g))
            .map(|(_, c)| {
                c.named
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(d, _)| d.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether any matching pod exists anywhere.
    pub(super) fn any(&self, key: KeyRef<'_>) -> bool {
        self.group(key)
            .and_then(|g| self.groups.get(g))
            .is_some_and(|(_, c)| {
                c.named.values().any(|n| *n > 0) || c.claims.iter().any(|n| *n > 0)
            })
    }

    /// For a spread constraint over a key other than hostname: the `reachable` domains the
    /// pod may go to, emptiest first, where its count (itself included if its selector
    /// matches it) stays within `max_skew` of the emptiest `counted` domain. That minimum is
    /// zero while fewer domains than `minDomains` are counted.
    pub(super) fn allowed_domains(
        &self,
        spread: &TopologySpread,
        pod: &Pod,
        counted: &BTreeSet<String>,
        reachable: &BTreeSet<String>,
    ) -> Vec<String> {
        let group = self.group(KeyRef::spread(spread, &pod.namespace));
        let count = |d: &String| self.count_in(group, &Domain::Named(d.clone()));
        let fewer_than_min_domains = spread
            .min_domains
            .is_some_and(|min| (counted.len() as i64) < min);
        let min = if fewer_than_min_domains {
            0
        } else {
            counted.iter().map(count).min().unwrap_or(0)
        };
        let own = i64::from(spread.counts(&pod.namespace, &pod.namespace, &pod.labels));
        let mut allowed: Vec<(i64, &String)> = reachable
            .iter()
            .map(|d| (count(d), d))
            .filter(|(n, _)| n + own - min <= spread.max_skew)
            .collect();
        allowed.sort();
        allowed.into_iter().map(|(_, d)| d.clone()).collect()
    }

    /// Records a pod placed where `domain_of(key)` tells its domains, and the hostname
    /// anti-affinity it carries there.
    pub(super) fn record(
        &mut self,
        pods: &[Pod],
        pod_index: usize,
        domain_of: impl Fn(&str) -> Option<Domain>,
    ) {
        let pod = &pods[pod_index];
        for g in self.members.of(pod_index) {
            let (key, counts) = &mut self.groups[*g as usize];
            if let Some(domain) = domain_of(&key.topology_key) {
                counts.add(domain, 1);
            }
        }
        if let Some(domain) = domain_of(labels::HOSTNAME) {
            let carried: Vec<usize> = self.hostname_anti_groups(pod).collect();
            self.repelling.at_mut(domain).extend(carried);
        }
        for term in pod
            .pod_affinity
            .iter()
            .filter(|t| t.anti && t.topology_key != labels::HOSTNAME)
        {
            if let (Some(group), Some(Domain::Named(domain))) = (
                self.group(KeyRef::affinity(term, &pod.namespace)),
                domain_of(&term.topology_key),
            ) {
                self.domain_repelling
                    .entry((term.topology_key.clone(), domain))
                    .or_default()
                    .push(group);
            }
        }
    }

    /// Per topology key other than hostname, the domains holding a pod whose required
    /// anti-affinity selects pod `pod` (kube-scheduler checks both directions).
    pub(super) fn repelled_domains(&self, pod: usize) -> BTreeMap<&str, BTreeSet<&str>> {
        let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for ((key, domain), groups) in &self.domain_repelling {
            if groups.iter().any(|g| self.members.counts(*g, pod)) {
                out.entry(key.as_str()).or_default().insert(domain.as_str());
            }
        }
        out
    }
}

/// A pod's preferred pod (anti-)affinity terms, or none when preferences are ignored.
fn preferred_terms(pod: &Pod, preferences: bool) -> impl Iterator<Item = &PodAffinityTerm> {
    pod.preferred_pod_affinity
        .iter()
        .filter(move |_| preferences)
        .map(|(_, t)| t)
}

/// The domain of an existing node (hostname domains are node names).
pub(super) fn existing_domain(node: &ExistingNode, key: &str) -> Option<Domain> {
    if key == labels::HOSTNAME {
        return Some(Domain::Named(
            node.labels
                .get(key)
                .cloned()
                .unwrap_or_else(|| node.name.clone()),
        ));
    }
    node.labels.get(key).cloned().map(Domain::Named)
}

/// The domain of a planned NodeClaim: known when its requirements pin one value.
pub(super) fn claim_domain(
    requirements: &Requirements,
    claim_index: usize,
    key: &str,
) -> Option<Domain> {
    if key == labels::HOSTNAME {
        return Some(Domain::Claim(claim_index));
    }
    let values = requirements.get(key)?.values()?;
    (values.len() == 1)
        .then(|| values.iter().next().cloned().map(Domain::Named))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(uid: &str, namespace: &str, labels: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::simple(uid, 100, 1 << 20);
        pod.namespace = namespace.to_owned();
        pod.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        pod
    }

    fn selecting(key: &str, value: &str) -> BTreeMap<String, String> {
        [(key.to_owned(), value.to_owned())].into()
    }

    #[test]
    fn pods_sharing_labels_share_the_groups_that_count_them() {
        let mut pods = vec![
            labelled("a-1", "default", &[("app", "a")]),
            labelled("a-2", "default", &[("app", "a")]),
            labelled("a-other-ns", "other", &[("app", "a")]),
            labelled("b", "default", &[("app", "b"), ("tier", "web")]),
            labelled("none", "default", &[]),
        ];
        pods[0].spread.push(TopologySpread {
            topology_key: labels::ZONE.into(),
            max_skew: 1,
            selector: selecting("app", "a"),
            expressions: Vec::new(),
            schedule_anyway: false,
            min_domains: None,
            ignore_node_affinity: false,
            honor_node_taints: false,
        });
        let term = |key: &str, selector, all_namespaces, anti| PodAffinityTerm {
            topology_key: key.into(),
            selector,
            expressions: Vec::new(),
            namespaces: Vec::new(),
            all_namespaces,
            namespace_selector: None,
            anti,
        };
        pods[3]
            .pod_affinity
            .push(term(labels::HOSTNAME, selecting("app", "a"), true, true));
        pods[4]
            .pod_affinity
            .push(term(labels::ZONE, selecting("tier", "web"), false, false));
        let topology = Topology::new(&pods, &[], true);
        assert_eq!(topology.groups.len(), 3);
        for (g, (key, _)) in topology.groups.iter().enumerate() {
            for (p, pod) in pods.iter().enumerate() {
                assert_eq!(
                    topology.group_matches(Some(g), p),
                    key.matches(&pod.namespace, &pod.labels),
                    "group {g} ({key:?}) and pod {}",
                    pod.uid
                );
            }
        }
        let members = &topology.members;
        assert_eq!(members.class_of[0], members.class_of[1]);
        assert_ne!(
            members.class_of[0], members.class_of[2],
            "namespaces differ"
        );
        assert_eq!(members.groups.len(), 4);
        assert!(topology.matches_zone_level_group(0));
        assert!(
            !topology.matches_zone_level_group(2),
            "the spread counts its own namespace"
        );
        assert!(topology.matches_zone_level_group(3));
        assert!(!topology.group_matches(None, 0));
    }

    #[test]
    fn keys_naming_the_same_namespaces_in_any_order_share_a_group() {
        let term = |namespaces: &[&str], all_namespaces, namespace_selector| PodAffinityTerm {
            topology_key: labels::ZONE.into(),
            selector: selecting("app", "a"),
            expressions: Vec::new(),
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            all_namespaces,
            namespace_selector,
            anti: false,
        };
        let own = term(&[], false, None);
        let listed = term(&["b", "default", "b"], false, None);
        let reordered = term(&["default", "b"], false, None);
        let just_default = term(&["default"], false, None);
        let all = term(&[], true, None);
        // A namespace selector that matched no namespace: the resolved list stays empty.
        let nothing = crate::model::pod::NamespaceSelector {
            match_labels: selecting("team", "none"),
            expressions: Vec::new(),
        };
        let none_selected = term(&[], false, Some(nothing));
        let key = |t| KeyRef::affinity(t, "default");
        assert!(key(&listed) == key(&reordered));
        assert!(key(&own) == key(&just_default), "the pod's own namespace");
        assert!(key(&own) != key(&listed));
        assert!(key(&all) != key(&none_selected));
        assert!(key(&all) != key(&own));
        let mut pods: Vec<Pod> = (0..6)
            .map(|i| labelled(&format!("p{i}"), "default", &[]))
            .collect();
        for (pod, t) in pods.iter_mut().zip([
            &own,
            &listed,
            &reordered,
            &just_default,
            &all,
            &none_selected,
        ]) {
            pod.pod_affinity.push(t.clone());
        }
        let topology = Topology::new(&pods, &[], true);
        let keys: Vec<&CountKey> = topology.groups.iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert_eq!(
            topology.group(key(&listed)),
            topology.group(key(&reordered))
        );
        assert_eq!(
            topology.group(key(&own)),
            topology.group(key(&just_default))
        );
        assert_eq!(
            topology.groups[topology.group(key(&listed)).unwrap()]
                .0
                .namespaces,
            Some(vec!["b".to_owned(), "default".to_owned()])
        );
        assert_ne!(
            topology.group(key(&all)),
            topology.group(key(&none_selected))
        );
    }
}
