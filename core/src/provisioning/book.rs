//! The scheduler's book of pods, pure: which pods are pending, which are nominated to which
//! NodeClaim on its way, which a round left to kube-scheduler on a running node, which the
//! last round found unschedulable, which room replacements keep for pods a disruption
//! command will move, and which nodes such commands hold. The scheduler actor feeds it what
//! the cluster and its NodePools report and what rounds decide, and reads from it what the
//! next round, a nomination check or a disruption pass needs; everything the scheduler
//! holds per pod is here, so its memory is in one place.
//!
//! A pod is in exactly one of pending or nominated until it binds or goes; a NodeClaim's
//! pods are the nominated pods naming it. [`LastSolved`] decides whether a round repeats the
//! last solved one (its input unchanged) or is solved afresh.

use std::collections::{BTreeMap, BTreeSet};

use super::InFlight;
use super::nominations::{Expired, LeftToKubeScheduler, NominatedClaim, NominatedPod};
use crate::events::NodeClaimPlan;
use crate::model::Pod;
use crate::ports::Instance;
use crate::scheduling::{Binding, SchedulingResult};

/// A NodeClaim a round planned, on its way until it ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The pods nominated to it.
    pub pods: BTreeSet<String>,
    /// Its instance, once launched.
    pub instance: Option<Instance>,
    /// Its NodeClaim's labels, once launched.
    pub labels: Option<BTreeMap<String, String>>,
    /// Its NodePool.
    pub nodepool: String,
    /// Since when its Node has been Ready, schedulable and free of taints its nominated pods
    /// do not tolerate (journal clock, ms): kube-scheduler could have bound them from then on.
    pub open_since: Option<i64>,
}

/// Where a pod was last seen, for the pod-state metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its node; empty while pending.
    pub node: String,
}

/// What binding a pod changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// How long it waited since first seen pending (ms), if it was.
    pub waited_ms: Option<i64>,
    /// Where it was seen before (its node empty while pending), if it was.
    pub before: Option<Seen>,
}

/// The scheduler's pods.
#[derive(Debug, Clone, Default)]
pub struct PodBook {
    pending: BTreeMap<String, Pod>,
    nominated: BTreeMap<String, (String, Pod)>,
    claims: BTreeMap<String, Claim>,
    unschedulable: BTreeMap<String, String>,
    seen: BTreeMap<String, Seen>,
    /// When each pod still unbound was first seen pending (journal clock, ms).
    pending_since: BTreeMap<String, i64>,
    /// Nodes disruption commands hold: no round places pods on them.
    held: BTreeSet<String>,
    /// Per replacement NodeClaim, the pods that will move onto it, whose room is kept.
    reserved: BTreeMap<String, Vec<Pod>>,
    /// Pods placed on running nodes, waiting for kube-scheduler.
    left: LeftToKubeScheduler,
}

impl PodBook {
    /// A pod kube-scheduler could not place, at `now_ms`: `false` when it is pending or
    /// nominated already (nothing changes).
    pub fn pend(&mut self, pod: Pod, now_ms: i64) -> bool {
        if self.knows(&pod.uid) {
            return false;
        }
        let seen = Seen {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            node: String::new(),
        };
        self.seen.insert(pod.uid.clone(), seen);
        self.pending_since.entry(pod.uid.clone()).or_insert(now_ms);
        self.pending.insert(pod.uid.clone(), pod);
        true
    }

    /// Whether `uid` is pending or nominated.
    pub fn knows(&self, uid: &str) -> bool {
        self.pending.contains_key(uid) || self.nominated.contains_key(uid)
    }

    /// A pod bound to `node` at `now_ms`: no longer pending or nominated.
    pub fn bind(&mut self, uid: &str, node: &str, now_ms: i64) -> Bound {
        self.stop_waiting(uid);
        let waited_ms = (self.pending_since.remove(uid)).map(|since| (now_ms - since).max(0));
        let before = self.seen.get_mut(uid).map(|seen| {
            let before = seen.clone();
            node.clone_into(&mut seen.node);
            before
        });
        Bound { waited_ms, before }
    }

    /// A pod deleted: forgotten everywhere; where it was last seen, if it was.
    pub fn delete(&mut self, uid: &str) -> Option<Seen> {
        self.stop_waiting(uid);
        self.pending_since.remove(uid);
        self.seen.remove(uid)
    }

    /// `uid` waits no more: not pending, nominated, left to kube-scheduler or unschedulable.
    fn stop_waiting(&mut self, uid: &str) {
        self.pending.remove(uid);
        self.left.forget(uid);
        if let Some((claim, _)) = self.nominated.remove(uid)
            && let Some(c) = self.claims.get_mut(&claim)
        {
            c.pods.remove(uid);
        }
        self.unschedulable.remove(uid);
    }

    /// The pending pods, by UID.
    pub fn pending(&self) -> &BTreeMap<String, Pod> {
        &self.pending
    }

    /// How many pods are nominated to NodeClaims on their way.
    pub fn nominated_count(&self) -> usize {
        self.nominated.len()
    }

    /// The pods the last round found unschedulable, with why, by UID.
    pub fn unschedulable(&self) -> &BTreeMap<String, String> {
        &self.unschedulable
    }

    /// Whether nothing waits: no pod pending or nominated.
    pub fn idle(&self) -> bool {
        self.pending.is_empty() && self.nominated.is_empty()
    }

    /// What a round was placed, carried out: pods placed on NodeClaims on their way are
    /// nominated to them; pods placed on running nodes stay pending, left to kube-scheduler
    /// there from `now_ms`; the pods of `unschedulable` (`(uid, why)`) are the ones the
    /// round found unschedulable now.
    pub fn placed<'a>(
        &mut self,
        bindings: &[Binding],
        unschedulable: impl IntoIterator<Item = (&'a str, &'a str)>,
        now_ms: i64,
    ) {
        for binding in bindings {
            if let Some(claim) = self.claims.get_mut(&binding.node)
                && let Some(pod) = self.pending.remove(&binding.pod)
            {
                claim.pods.insert(pod.uid.clone());
                self.nominated
                    .insert(pod.uid.clone(), (binding.node.clone(), pod));
            }
        }
        let pending = &self.pending;
        self.left.placed(
            (bindings.iter())
                .filter(|b| pending.contains_key(&b.pod))
                .map(|b| (b.pod.as_str(), b.node.as_str())),
            now_ms,
        );
        self.unschedulable = (unschedulable.into_iter())
            .map(|(uid, why)| (uid.to_owned(), why.to_owned()))
            .collect();
    }

    /// A planned NodeClaim counted as capacity on its way, with the pending pods planned
    /// onto it nominated to it: those pods.
    pub fn track(&mut self, plan: &NodeClaimPlan) -> Vec<&Pod> {
        let mut pods = BTreeSet::new();
        for uid in &plan.pods {
            if let Some(pod) = self.pending.remove(uid) {
                self.nominated
                    .insert(uid.clone(), (plan.nodeclaim.clone(), pod));
                pods.insert(uid.clone());
            }
        }
        let claim = Claim {
            pods,
            instance: None,
            labels: None,
            nodepool: plan.nodepool.clone(),
            open_since: None,
        };
        self.claims.insert(plan.nodeclaim.clone(), claim);
        (plan.pods.iter())
            .filter_map(|uid| self.nominated.get(uid))
            .filter(|(claim, _)| *claim == plan.nodeclaim)
            .map(|(_, pod)| pod)
            .collect()
    }

    /// Pods that will move onto replacement NodeClaims: their room there is kept.
    pub fn reserve(&mut self, moved: Vec<(String, Pod)>) {
        for (claim, pod) in moved {
            self.reserved.entry(claim).or_default().push(pod);
        }
    }

    /// The moved pods no longer need the room kept for them on these replacements.
    pub fn release_reservations(&mut self, claims: &[String]) {
        for claim in claims {
            self.reserved.remove(claim);
        }
    }

    /// A NodeClaim launched.
    pub fn launched(
        &mut self,
        nodeclaim: &str,
        instance: Instance,
        labels: BTreeMap<String, String>,
    ) {
        if let Some(claim) = self.claims.get_mut(nodeclaim) {
            claim.instance = Some(instance);
            claim.labels = Some(labels);
        }
    }

    /// A NodeClaim ended (or was refused): its pods not yet bound are pending again; how
    /// many.
    pub fn claim_ended(&mut self, nodeclaim: &str) -> usize {
        self.reserved.remove(nodeclaim);
        let Some(claim) = self.claims.remove(nodeclaim) else {
            return 0;
        };
        let mut returned = 0;
        for uid in claim.pods {
            if let Some((_, pod)) = self.nominated.remove(&uid) {
                self.pending.insert(uid, pod);
                returned += 1;
            }
        }
        returned
    }

    /// A disruption command takes `nodes`, unless pods are nominated to any of `nodeclaims`
    /// (`force` takes them anyway): `Err` with those NodeClaims.
    pub fn hold(
        &mut self,
        nodeclaims: &[String],
        nodes: Vec<String>,
        force: bool,
    ) -> Result<(), Vec<String>> {
        let nominated: Vec<String> = (nodeclaims.iter())
            .filter(|n| self.claims.get(*n).is_some_and(|c| !c.pods.is_empty()))
            .cloned()
            .collect();
        if !force && !nominated.is_empty() {
            return Err(nominated);
        }
        self.held.extend(nodes);
        Ok(())
    }

    /// A disruption command no longer holds these nodes.
    pub fn release(&mut self, nodes: &[String]) {
        for node in nodes {
            self.held.remove(node);
        }
    }

    /// Whether a disruption command holds `node`.
    pub fn held(&self, node: &str) -> bool {
        self.held.contains(node)
    }

    /// The NodeClaims on their way, as a round counts them.
    pub fn in_flight(&self) -> Vec<InFlight<'_>> {
        (self.claims.iter())
            .map(|(name, claim)| InFlight {
                name,
                nodepool: &claim.nodepool,
                instance: claim.instance.as_ref(),
                labels: claim.labels.as_ref(),
            })
            .collect()
    }

    /// The pods on their way to NodeClaims, `(nodeclaim, pod)`: nominated ones, and those
    /// replacements keep room for.
    pub fn on_their_way(&self) -> impl Iterator<Item = (&str, &Pod)> {
        let nominated = (self.nominated.values()).map(|(claim, pod)| (claim.as_str(), pod));
        let reserved = (self.reserved.iter())
            .flat_map(|(claim, pods)| pods.iter().map(|p| (claim.as_str(), p)));
        nominated.chain(reserved)
    }

    /// The pending pods as the next round sees them (nodes that refused a left pod refused
    /// to it).
    pub fn round_pods(&self) -> Vec<Pod> {
        self.pending.values().map(|p| self.left.shape(p)).collect()
    }

    /// NodeClaims with pods nominated to them.
    pub fn nominated_claims(&self) -> BTreeSet<String> {
        (self.claims.iter())
            .filter(|(_, c)| !c.pods.is_empty())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Workloads (`namespace/Kind/name`) with pods pending or nominated that the last round
    /// did not find unschedulable (a pod that fits nowhere is not waiting for a node, so its
    /// siblings may move), and that no restricted selection or volume blocks.
    pub fn scaling_out(&self) -> BTreeSet<String> {
        let pending = self.pending.iter();
        let nominated = (self.nominated.iter()).map(|(uid, (_, pod))| (uid, pod));
        (pending.chain(nominated))
            .filter(|(uid, pod)| pod.blocked.is_none() && !self.unschedulable.contains_key(*uid))
            .filter_map(|(_, pod)| pod.owner_key())
            .collect()
    }

    /// What a nomination check needs of the NodeClaims: the launched ones with pods
    /// nominated to them and their clocks, and whether pods are in flight elsewhere (on
    /// NodeClaims not launched yet, or moving onto replacements).
    pub fn nominations(&self) -> (Vec<NominatedClaim>, bool) {
        let mut claims = Vec::new();
        let mut in_flight_elsewhere = !self.reserved.is_empty();
        for (name, claim) in &self.claims {
            let Some(instance) = claim.instance.as_ref().filter(|_| !claim.pods.is_empty()) else {
                in_flight_elsewhere |= !claim.pods.is_empty();
                continue;
            };
            let pods = (claim.pods.iter())
                .map(|uid| NominatedPod {
                    uid: uid.clone(),
                    tolerations: (self.nominated.get(uid))
                        .map(|(_, pod)| pod.tolerations.clone())
                        .unwrap_or_default(),
                })
                .collect();
            claims.push(NominatedClaim {
                nodeclaim: name.clone(),
                provider_id: instance.provider_id.clone(),
                pods,
                open_since_ms: claim.open_since,
            });
        }
        (claims, in_flight_elsewhere)
    }

    /// Whether a nomination check has anything to look at.
    pub fn waiting(&self) -> bool {
        !self.left.is_empty()
            || (self.claims.values()).any(|c| c.instance.is_some() && !c.pods.is_empty())
    }

    /// The pods left to kube-scheduler on running nodes.
    pub fn left(&self) -> &LeftToKubeScheduler {
        &self.left
    }

    /// A nomination check's outcome, carried out: the clocks it set, and each wait that ran
    /// out (a nominated pod is pending again; a node that did not take a left pod is refused
    /// to it). Returns the waits that ended, with their pod's `namespace/name` when known: a
    /// nomination only when the pod was still nominated, a left pod always.
    pub fn checked<'a>(
        &mut self,
        outcome: &'a super::nominations::NominationOutcome,
    ) -> Vec<(&'a Expired, Option<String>)> {
        for (name, claim) in &mut self.claims {
            claim.open_since = outcome.open_since.get(name).copied();
        }
        let mut ended = Vec::new();
        for expired in &outcome.expired {
            if expired.nodeclaim.is_empty() {
                ended.push((expired, self.pending.get(&expired.uid).map(Pod::key)));
                continue;
            }
            if let Some(claim) = self.claims.get_mut(&expired.nodeclaim) {
                claim.pods.remove(&expired.uid);
            }
            if let Some((_, pod)) = self.nominated.remove(&expired.uid) {
                ended.push((expired, Some(pod.key())));
                self.pending.insert(expired.uid.clone(), pod);
            }
        }
        self.left.apply(outcome);
        ended
    }
}

/// The last round the solver ran: a round whose recorded input is the same (compared whole,
/// serialized: a digest could collide) repeats its decisions instead of solving again, unless
/// it was solved so long ago that the journal may have trimmed its input away.
#[derive(Debug, Clone)]
pub struct LastSolved {
    input_json: Option<Vec<u8>>,
    solved_ms: i64,
    round: u64,
    result: SchedulingResult,
}

impl LastSolved {
    /// Round `round`, solved at `solved_ms` from `input_json` (`None` if its input could not
    /// be serialized: no round repeats it).
    pub fn new(
        round: u64,
        input_json: Option<Vec<u8>>,
        solved_ms: i64,
        result: SchedulingResult,
    ) -> Self {
        LastSolved {
            input_json,
            solved_ms,
            round,
            result,
        }
    }

    /// What a round with `input_json` at `now_ms` repeats, if it repeats this one: its
    /// number and decisions. `keep_ms` is how long a solved round's input stays in the
    /// journal.
    pub fn repeated_by(
        &self,
        input_json: Option<&[u8]>,
        now_ms: i64,
        keep_ms: i64,
    ) -> Option<(u64, &SchedulingResult)> {
        let same = input_json.is_some() && self.input_json.as_deref() == input_json;
        (same && now_ms - self.solved_ms < keep_ms).then_some((self.round, &self.result))
    }
}

#[cfg(test)]
mod tests;
