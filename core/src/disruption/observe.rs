//! From what the actors and the cluster report to the [`Snapshot`] a pass decides from: what
//! each NodeClaim's actor knows of it ([`ClaimFacts`]), when pods last came to or left each
//! node ([`PodEvents`], told apart from one pass to the next), and which NodeClaims
//! commands in flight hold ([`snapshot`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::orchestration::Command;
use super::{CommandRole, DriftMark, NodeSnapshot, PoolPolicy, Snapshot};
use crate::api::nodeclaim::condition;
use crate::events::NodeClaimState;
use crate::lifecycle::nodeclaim::Live;
use crate::ports::{BoundPod, DisruptionView, OfferingKey};
use crate::vocab::labels;

/// What a NodeClaim's actor knows of it that disruption reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimFacts {
    /// Name.
    pub nodeclaim: String,
    /// NodePool.
    pub nodepool: String,
    /// Lifecycle state.
    pub state: NodeClaimState,
    /// Node, once registered.
    pub node: Option<String>,
    /// $/h of its instance, once launched.
    pub price: f64,
    /// Its instance's type, zone and capacity type, once launched.
    pub offering: Option<OfferingKey>,
    /// When it was created (its instance's launch time when the cloud says, else when its
    /// actor started), ms since the Unix epoch.
    pub created_ms: i64,
    /// When its `Initialized` condition turned True.
    pub initialized_ms: Option<i64>,
    /// Its `Drifted` condition, when True.
    pub drifted: Option<DriftMark>,
    /// `expireAfter`; `None` is `Never`.
    pub expire_after: Option<Duration>,
    /// `terminationGracePeriod`.
    pub termination_grace_period: Option<Duration>,
    /// `karpenter.sh/do-not-disrupt: "true"` on the NodeClaim.
    pub do_not_disrupt: bool,
    /// Its `DisruptionReason` condition is set (a command marked it).
    pub marked: bool,
}

fn ms(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    time.0.as_millisecond()
}

impl ClaimFacts {
    /// What `live` says; `started_ms` is when its actor started.
    pub fn of(live: &Live, started_ms: i64) -> ClaimFacts {
        let object = &live.object;
        let conditions = object
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let true_since = |type_: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == "True")
        };
        let instance = live.view.instance.as_ref();
        ClaimFacts {
            nodeclaim: live.name.clone(),
            nodepool: live.view.nodepool.clone(),
            state: live.view.state,
            node: live.view.node.clone(),
            price: instance.map_or(0.0, |i| i.price),
            offering: instance.map(|i| OfferingKey {
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: i.capacity_type,
            }),
            created_ms: instance
                .and_then(|i| i.launched_at_ms)
                .unwrap_or(started_ms),
            initialized_ms: true_since(condition::INITIALIZED)
                .map(|c| ms(&c.last_transition_time))
                .or((live.view.state >= NodeClaimState::Initialized).then_some(started_ms)),
            drifted: true_since(condition::DRIFTED).map(|c| DriftMark {
                reason: c.reason.clone(),
                since_ms: ms(&c.last_transition_time),
            }),
            expire_after: object.spec.expire_after.0,
            termination_grace_period: object.spec.termination_grace_period.as_ref().map(|d| d.0),
            do_not_disrupt: object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
                .is_some_and(|v| v == "true"),
            marked: live.disruption.is_some()
                || conditions
                    .iter()
                    .any(|c| c.type_ == condition::DISRUPTION_REASON),
        }
    }
}

/// When pods last came to or left each node, told apart from one look at the bound pods to
/// the next (so within one pass interval). A node first seen with pods counts as having
/// just seen one come (after a restart nothing is known, so nothing is consolidated before
/// `consolidateAfter` has passed again); a node first seen empty has seen none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEvents {
    nodes: BTreeMap<String, (BTreeSet<String>, Option<i64>)>,
}

impl PodEvents {
    /// Looks at the pods bound now on `nodes` (the nodes of live NodeClaims), at `now_ms`;
    /// nodes no longer given are forgotten.
    pub fn observe<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a str>,
        pods: &[BoundPod],
        now_ms: i64,
    ) {
        let mut bound: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for pod in pods {
            bound
                .entry(pod.node.as_str())
                .or_default()
                .insert(pod.pod.uid.clone());
        }
        let mut next = BTreeMap::new();
        for node in nodes {
            let now = bound.remove(node).unwrap_or_default();
            let last = match self.nodes.remove(node) {
                Some((before, last)) if before == now => last,
                Some(_) => Some(now_ms),
                None if now.is_empty() => None,
                None => Some(now_ms),
            };
            next.insert(node.to_owned(), (now, last));
        }
        self.nodes = next;
    }

    /// When a pod last came to or left `node`, if one did since it was first seen.
    pub fn last(&self, node: &str) -> Option<i64> {
        self.nodes.get(node).and_then(|(_, last)| *last)
    }
}

/// What a pass is given, besides the time.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// Now (ms since the Unix epoch).
    pub now_ms: i64,
    /// Every live NodeClaim.
    pub claims: &'a [ClaimFacts],
    /// The cluster's pods, PDBs and protections.
    pub view: &'a DisruptionView,
    /// The NodePools the scheduler plans for, with their disruption settings.
    pub pools: &'a [PoolPolicy],
    /// NodeClaims with pods nominated to them.
    pub nominated: &'a BTreeSet<String>,
    /// Commands in flight.
    pub commands: &'a BTreeMap<u64, Command>,
    /// When pods last came or went, per node.
    pub pod_events: &'a PodEvents,
    /// The `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
    /// The `StaticCapacity` feature gate.
    pub static_capacity: bool,
    /// Nodes and NodeClaims hosting CapacityBuffers' virtual pods.
    pub buffered: &'a BTreeSet<String>,
    /// The `NodeRepair` gate's policies, when on.
    pub repair: Option<&'a [super::repair::RepairPolicy]>,
    /// Workloads the scheduler is still provisioning for (`namespace/Kind/name`).
    pub scaling_out: &'a BTreeSet<String>,
}

/// The snapshot a pass decides from.
pub fn snapshot(observed: Observed<'_>) -> Snapshot {
    let view = observed.view;
    let mut roles: BTreeMap<&str, CommandRole> = BTreeMap::new();
    for command in observed.commands.values() {
        for member in &command.candidates {
            roles.insert(&member.nodeclaim, CommandRole::Candidate);
        }
        for replacement in &command.replacements {
            roles.insert(replacement, CommandRole::Replacement);
        }
    }
    let mut pods: BTreeMap<&str, Vec<BoundPod>> = BTreeMap::new();
    for pod in &view.pods {
        pods.entry(pod.node.as_str()).or_default().push(pod.clone());
    }
    let mut nodes: Vec<NodeSnapshot> = observed
        .claims
        .iter()
        .filter(|c| c.state != NodeClaimState::Terminated)
        .map(|c| {
            let node = c.node.as_deref();
            NodeSnapshot {
                nodeclaim: c.nodeclaim.clone(),
                nodepool: c.nodepool.clone(),
                node: c.node.clone(),
                state: c.state,
                ready: node.is_some_and(|n| !view.not_ready.contains(n)),
                command: roles.get(c.nodeclaim.as_str()).copied(),
                nominated: observed.nominated.contains(&c.nodeclaim),
                do_not_disrupt: c.do_not_disrupt
                    || view.protected.contains(&c.nodeclaim)
                    || node.is_some_and(|n| view.protected.contains(n)),
                created_ms: c.created_ms,
                initialized_ms: c.initialized_ms,
                last_pod_event_ms: node.and_then(|n| observed.pod_events.last(n)),
                expire_after: c.expire_after,
                termination_grace_period: c.termination_grace_period,
                drifted: c.drifted.clone(),
                price: c.price,
                offering: c.offering.clone(),
                pods: node.and_then(|n| pods.get(n)).cloned().unwrap_or_default(),
                conditions: node
                    .and_then(|n| view.conditions.get(n))
                    .cloned()
                    .unwrap_or_default(),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.nodeclaim.cmp(&b.nodeclaim));
    Snapshot {
        now_ms: observed.now_ms,
        pools: observed.pools.to_vec(),
        nodes,
        pdbs: view.pdbs.clone(),
        spot_to_spot: observed.spot_to_spot,
        static_capacity: observed.static_capacity,
        buffered: observed.buffered.clone(),
        repair: observed.repair.map(super::repair::recorded),
        scaling_out: observed.scaling_out.clone(),
    }
}

/// NodeClaims whose mark no command holds: a crash or a leader change left the
/// `DisruptionReason` condition or the disrupted taint behind. `tainted` are the nodes that
/// carry `karpenter.sh/disrupted` while still schedulable (a drain's cordon carries it too,
/// and is not stale). Nodes being deleted keep their marks.
pub fn stale_marks(
    claims: &[ClaimFacts],
    tainted: &BTreeSet<String>,
    commands: &BTreeMap<u64, Command>,
) -> Vec<String> {
    let held: BTreeSet<&str> = commands
        .values()
        .filter(|c| !c.phase.ended())
        .flat_map(|c| c.candidates.iter().map(|m| m.nodeclaim.as_str()))
        .collect();
    claims
        .iter()
        .filter(|c| c.state < NodeClaimState::Draining && !held.contains(c.nodeclaim.as_str()))
        .filter(|c| c.marked || c.node.as_ref().is_some_and(|n| tainted.contains(n)))
        .map(|c| c.nodeclaim.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::test_support::pod;
    use crate::events::disruption::{Member, Method, Phase};

    fn bound(uid: &str, node: &str) -> BoundPod {
        let mut p = pod(uid, true);
        p.pod.uid = uid.into();
        p.node = node.into();
        p
    }

    #[test]
    fn a_pod_coming_or_going_is_seen_at_the_next_look() {
        let mut events = PodEvents::default();
        events.observe(["a", "b"], &[bound("p1", "a")], 1_000);
        // First seen: with pods, just now; empty, never.
        assert_eq!(events.last("a"), Some(1_000));
        assert_eq!(events.last("b"), None);
        events.observe(["a", "b"], &[bound("p1", "a")], 2_000);
        assert_eq!(events.last("a"), Some(1_000));
        events.observe(["a", "b"], &[bound("p1", "a"), bound("p2", "b")], 3_000);
        assert_eq!(
            (events.last("a"), events.last("b")),
            (Some(1_000), Some(3_000))
        );
        events.observe(["a", "b"], &[bound("p2", "b")], 4_000);
        assert_eq!(events.last("a"), Some(4_000));
        // A node gone is forgotten.
        events.observe(["b"], &[bound("p2", "b")], 5_000);
        assert_eq!(events.last("a"), None);
    }

    fn facts(name: &str, state: NodeClaimState, marked: bool) -> ClaimFacts {
        ClaimFacts {
            nodeclaim: name.into(),
            nodepool: "default".into(),
            state,
            node: Some(format!("node-{name}")),
            price: 0.1,
            offering: None,
            created_ms: 0,
            initialized_ms: Some(0),
            drifted: None,
            expire_after: None,
            termination_grace_period: None,
            do_not_disrupt: false,
            marked,
        }
    }

    #[test]
    fn marks_no_command_holds_are_stale_unless_the_node_is_being_deleted() {
        let claims = vec![
            facts("held", NodeClaimState::Initialized, true),
            facts("left", NodeClaimState::Initialized, true),
            facts("tainted", NodeClaimState::Initialized, false),
            facts("draining", NodeClaimState::Draining, true),
            facts("clean", NodeClaimState::Initialized, false),
        ];
        let tainted: BTreeSet<String> =
            ["node-tainted".to_owned(), "node-draining".to_owned()].into();
        let commands: BTreeMap<u64, Command> = [(
            1,
            Command {
                id: 1,
                method: Method::Drift,
                candidates: vec![Member {
                    nodeclaim: "held".into(),
                    node: Some("node-held".into()),
                }],
                replacements: Vec::new(),
                phase: Phase::WaitingReadiness,
                started_ms: 0,
                waiting_reported: false,
            },
        )]
        .into();
        assert_eq!(
            stale_marks(&claims, &tainted, &commands),
            vec!["left".to_owned(), "tainted".to_owned()]
        );
    }

    #[test]
    fn the_snapshot_marks_command_members_nominations_and_protection() {
        let claims = vec![
            facts("a", NodeClaimState::Initialized, false),
            facts("b", NodeClaimState::Initialized, false),
            facts("c", NodeClaimState::Launched, false),
        ];
        let view = DisruptionView {
            pods: vec![bound("p1", "node-a")],
            protected: ["node-b".to_owned()].into(),
            not_ready: ["node-c".to_owned()].into(),
            ..Default::default()
        };
        let commands: BTreeMap<u64, Command> = [(
            4,
            Command {
                id: 4,
                method: Method::Drift,
                candidates: vec![Member {
                    nodeclaim: "a".into(),
                    node: Some("node-a".into()),
                }],
                replacements: vec!["c".into()],
                phase: Phase::WaitingReadiness,
                started_ms: 0,
                waiting_reported: false,
            },
        )]
        .into();
        let nominated: BTreeSet<String> = ["b".to_owned()].into();
        let mut events = PodEvents::default();
        events.observe(["node-a", "node-b"], &view.pods, 7);
        let s = snapshot(Observed {
            spot_to_spot: false,
            static_capacity: false,
            buffered: &BTreeSet::new(),
            repair: None,
            scaling_out: &BTreeSet::new(),
            now_ms: 9,
            claims: &claims,
            view: &view,
            pools: &[],
            nominated: &nominated,
            commands: &commands,
            pod_events: &events,
        });
        let by = |n: &str| {
            s.nodes
                .iter()
                .find(|x| x.nodeclaim == n)
                .cloned()
                .unwrap_or_else(|| panic!("{n}"))
        };
        assert_eq!(by("a").command, Some(CommandRole::Candidate));
        assert_eq!(by("a").pods.len(), 1);
        assert_eq!(by("a").last_pod_event_ms, Some(7));
        assert!(by("b").nominated && by("b").do_not_disrupt);
        assert_eq!(by("c").command, Some(CommandRole::Replacement));
        assert!(!by("c").ready);
    }
}
