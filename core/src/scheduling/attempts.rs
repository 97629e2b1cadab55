//! The attempts a pod is placed under: its preferences as requirements first, relaxed one
//! at a time in upstream's order, then with PreferNoSchedule taints allowed, then (with
//! [`MinValuesPolicy::BestEffort`]) with minValues relaxed; and which failed pods to try
//! again once others are placed.

use std::borrow::Cow;

use crate::model::pod::TopologySpread;
use crate::model::taints::untolerated_avoiding;
use crate::model::{Pod, Requirements};
use crate::vocab::labels;

use super::topology::CountKey;
use super::{MinValuesPolicy, PreferencePolicy, SchedulingInput};

/// How far one attempt to place a pod bends the NodePools' rules.
#[derive(Debug, Clone, Copy)]
pub(super) struct Leniency {
    /// Keep off nodes and pools with PreferNoSchedule taints the pod does not tolerate.
    pub(super) avoid_soft_taints: bool,
    /// Let a NodeClaim keep fewer distinct values than minValues ([`MinValuesPolicy`]).
    pub(super) relax_min_values: bool,
}

/// What the round knows before trying any pod that shapes every pod's attempts.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttemptPolicy {
    /// Some NodePool or node has a PreferNoSchedule taint.
    pub(super) soft_taints: bool,
    /// A last attempt may relax minValues (BestEffort, and some pool asks for minValues).
    pub(super) relax_min_values: bool,
    /// What to do with preferences.
    pub(super) preferences: PreferencePolicy,
}

impl AttemptPolicy {
    pub(super) fn of(input: &SchedulingInput) -> Self {
        let soft =
            |taints: &[crate::model::Taint]| taints.iter().any(|t| t.effect == "PreferNoSchedule");
        let soft_taints = input.nodepools.iter().any(|p| soft(&p.taints))
            || input.existing.iter().any(|n| soft(&n.taints));
        let any_min_values = input
            .nodepools
            .iter()
            .any(|p| p.requirements.iter().any(|(_, r)| r.min_values.is_some()));
        AttemptPolicy {
            soft_taints,
            relax_min_values: input.min_values_policy == MinValuesPolicy::BestEffort
                && any_min_values,
            preferences: input.preference_policy,
        }
    }

    /// The pod with its preferences as requirements first, then relaxed one at a time;
    /// PreferNoSchedule taints are kept off until the very last attempt.
    pub(super) fn attempts<'p>(&self, pod: &'p Pod) -> Vec<(Cow<'p, Pod>, Leniency)> {
        let strict = Leniency {
            avoid_soft_taints: self.soft_taints,
            relax_min_values: false,
        };
        let mut attempts: Vec<(Cow<'_, Pod>, Leniency)> = relaxations(pod, self.preferences)
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
            if self.relax_min_values {
                attempts.push((
                    last,
                    Leniency {
                        avoid_soft_taints: false,
                        relax_min_values: true,
                    },
                ));
            }
        }
        attempts
    }
}

/// Per NodePool, whether a pod tolerates its taints: avoiding PreferNoSchedule ones, and
/// not.
pub(super) struct Tolerated {
    pub(super) avoiding: Vec<bool>,
    pub(super) all: Vec<bool>,
}

impl Tolerated {
    pub(super) fn of(input: &SchedulingInput, pod: &Pod) -> Self {
        let by = |avoid_soft_taints: bool| -> Vec<bool> {
            input
                .nodepools
                .iter()
                .map(|p| {
                    untolerated_avoiding(&p.taints, &pod.tolerations, avoid_soft_taints).is_none()
                })
                .collect()
        };
        Tolerated {
            avoiding: by(true),
            all: by(false),
        }
    }

    /// Per NodePool, under `leniency`.
    pub(super) fn under(&self, leniency: Leniency) -> &[bool] {
        if leniency.avoid_soft_taints {
            &self.avoiding
        } else {
            &self.all
        }
    }
}

/// Why no round can place the pod, whatever it decides: resources nothing provides, volumes
/// that cannot be used, constraints this scheduler does not model.
pub(super) fn unplaceable(pod: &Pod) -> Option<String> {
    if !pod.unknown_resources.is_empty() {
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
    }
}

/// The constraint sets a pod is tried under, strictest first. With preferences respected:
/// every preferred pod affinity and anti-affinity term as required, the heaviest preferred
/// node affinity term as required, and every `ScheduleAnyway` spread kept; each following
/// set relaxes one more, in upstream's order (preferred pod affinity, then preferred pod
/// anti-affinity, heaviest first; then preferred node affinity, the next heaviest taking
/// over; then `ScheduleAnyway` spreads). With preferences ignored: the pod without them.
pub(super) fn relaxations(pod: &Pod, policy: PreferencePolicy) -> Vec<Cow<'_, Pod>> {
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
pub(super) fn others_decide(pod: &Pod) -> bool {
    pod.pod_affinity.iter().any(|t| !t.anti) || pod.spread.iter().any(|s| !s.schedule_anyway)
}

/// Per pod, the keys (other than hostname) of the required pod-affinity terms of the round's
/// pods that select it: it is pinned to one domain of each, since a claim left open to
/// several zones gives its followers no zone to follow it to.
pub(super) fn affinity_targets(input: &SchedulingInput) -> Vec<Vec<String>> {
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
