//! What a run looked like over time, read from its journal: the journal's own fold
//! ([`ClusterView`]) sampled at a fixed interval of journal time. `simulate --report` and
//! `journal report` draw the same series from the same events, so a report made after the
//! fact shows what the live run showed.
//!
//! Beside it, one scheduling round from scratch for the pods bound at a moment, planned after
//! the fact: the pods as the rounds that placed them recorded them, the NodePools and instance
//! types of the latest recorded round, no existing node. Planned from the journal rather than
//! asked of the live actors, so making a report changes nothing in the run it reports.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::Context as _;
use karpenter_core::events::{ClusterView, DomainEvent, RoundInput};
use karpenter_core::model::{InstanceType, Pod, Resources};
use karpenter_core::scheduling::bound::cost_lower_bound;
use karpenter_journal::{Journal, Projection as _, Until};

/// The fleet and the pods at one moment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    /// Journal time, ms since the Unix epoch.
    pub at_ms: i64,
    /// $/h of the instances running (launched, not yet terminated).
    pub cost_per_hour: f64,
    /// Those instances by capacity type (`spot`, `on-demand`, `reserved`).
    pub nodes: BTreeMap<String, usize>,
    /// Pods waiting for capacity.
    pub pods_pending: usize,
    /// Pods bound to nodes.
    pub pods_bound: usize,
    /// NodeClaims drained so far, by reason (`empty`, `underutilized`, `drifted`, …).
    pub disrupted: BTreeMap<String, u64>,
}

/// One round from scratch for the pods bound at a moment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScratchPoint {
    /// Journal time, ms since the Unix epoch.
    pub at_ms: i64,
    /// Pods planned: the bound pods a recorded round held, and those taken for their
    /// siblings' (see [`Recorded::like`]).
    pub pods: usize,
    /// Bound pods left out: neither they nor a sibling were in a recorded round.
    pub unknown: usize,
    /// $/h of the round's NodeClaims.
    pub cost_per_hour: f64,
    /// The round's lower bound, $/h.
    pub bound: Option<f64>,
}

/// At most this many rounds from scratch are planned for one timeline.
pub const SCRATCH_POINTS: i64 = 120;

/// A run's points, oldest first.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Timeline {
    /// One point per interval, and one at the last event.
    pub points: Vec<Point>,
    /// Every capacity type and disruption reason that occurs, for the charts' legends.
    pub capacity_types: BTreeSet<String>,
    /// Every disruption reason that occurs.
    pub reasons: BTreeSet<String>,
    /// The first sequence number read (above 1 when retention trimmed the history before).
    pub first_seq: u64,
    /// Rounds from scratch, at most [`SCRATCH_POINTS`] spread over the run.
    pub scratch: Vec<ScratchPoint>,
}

/// What planning from scratch needs, gathered while folding.
#[derive(Default)]
struct Recorded {
    /// Pods as the rounds that saw them recorded them, by UID, while they exist.
    pods: HashMap<String, Pod>,
    /// The latest recorded pod of each owner (`namespace/name` less its last `-` part).
    siblings: HashMap<String, Pod>,
    /// The latest recorded round input, without its pods and existing nodes.
    input: Option<RoundInput>,
    /// Instance-type sets by digest.
    catalogs: BTreeMap<String, Vec<Arc<InstanceType>>>,
}

impl Recorded {
    fn observe(&mut self, event: &DomainEvent) {
        match event {
            DomainEvent::RoundCompleted(r) => {
                if let Some(input) = &r.input {
                    for pod in &input.pods {
                        self.pods.insert(pod.uid.clone(), pod.clone());
                        if let Some(owner) = owner(&pod.key()) {
                            self.siblings.insert(owner.to_owned(), pod.clone());
                        }
                    }
                    let mut kept = (**input).clone();
                    kept.pods.clear();
                    kept.existing.clear();
                    self.input = Some(kept);
                }
            }
            DomainEvent::PodDeleted { uid } => {
                self.pods.remove(uid);
            }
            DomainEvent::InstanceTypesObserved {
                digest,
                instance_types,
            } => {
                self.catalogs.insert(digest.clone(), instance_types.clone());
            }
            _ => {}
        }
    }

    /// The pod `uid` as recorded; else, when kube-scheduler bound it before any round saw it
    /// (a replica recreated after an eviction, say), its latest recorded sibling of the same
    /// owner under its own UID: replicas share their spec.
    fn like(&self, uid: &str, view: &ClusterView) -> Option<Pod> {
        if let Some(pod) = self.pods.get(uid) {
            return Some(pod.clone());
        }
        let name = view.names.get(uid)?;
        let mut pod = self.siblings.get(owner(name)?)?.clone();
        pod.uid = uid.to_owned();
        if let Some((_, short)) = name.split_once('/') {
            pod.name = short.to_owned();
        }
        Some(pod)
    }

    /// One round from scratch for the pods bound in `view`; `None` before any recorded round
    /// or when its catalogs are gone.
    fn scratch(&self, view: &ClusterView, at_ms: i64) -> Option<ScratchPoint> {
        let mut round = self.input.clone()?;
        let mut unknown = 0;
        for uid in view.bound.keys() {
            match self.like(uid, view) {
                Some(pod) => round.pods.push(pod),
                None => unknown += 1,
            }
        }
        for pool in &mut round.nodepools {
            pool.usage = Resources::ZERO;
            pool.node_count = 0;
        }
        let mut input = round.rebuild(&self.catalogs)?;
        // The fleet's own reserved instances are not there either.
        let mut in_use = std::collections::BTreeMap::new();
        let running = (view.nodeclaims.values())
            .filter(|c| c.state != karpenter_core::events::NodeClaimState::Terminated);
        for reservation in running.filter_map(|c| c.instance.as_ref()?.reservation.as_ref()) {
            *in_use.entry(reservation.id.clone()).or_insert(0) += 1;
        }
        karpenter_core::scheduling::credit_reservations(&mut input, &in_use);
        // Planned whole, a NodeClaim past a reservation's count is bought otherwise.
        let mode = karpenter_core::scheduling::ReservedOfferingMode::Fallback;
        let result = karpenter_core::scheduling::solve_in(&input, None, mode);
        Some(ScratchPoint {
            at_ms,
            pods: input.pods.len(),
            unknown,
            cost_per_hour: result.new_capacity_cost(),
            bound: cost_lower_bound(&input).ok(),
        })
    }
}

impl Timeline {
    /// Journal time the points span, ms.
    pub fn span_ms(&self) -> i64 {
        match (self.points.first(), self.points.last()) {
            (Some(first), Some(last)) => last.at_ms - first.at_ms,
            _ => 0,
        }
    }
}

/// The owner a pod name implies: `namespace/web-000123` → `namespace/web`, and
/// `namespace/web-5d8f9c-xk2lp` → `namespace/web-5d8f9c` (its ReplicaSet).
fn owner(key: &str) -> Option<&str> {
    key.rsplit_once('-').map(|(owner, _)| owner)
}

fn point(view: &ClusterView, at_ms: i64, disrupted: &BTreeMap<String, u64>) -> Point {
    let mut nodes: BTreeMap<String, usize> = BTreeMap::new();
    let mut cost = 0.0;
    for (_, claim) in view.live_nodeclaims() {
        if let Some(instance) = &claim.instance {
            cost += instance.price;
            *nodes.entry(instance.capacity_type.to_string()).or_default() += 1;
        }
    }
    Point {
        at_ms,
        cost_per_hour: cost,
        nodes,
        pods_pending: view.pending.len(),
        pods_bound: view.bound.len(),
        disrupted: disrupted.clone(),
    }
}

/// Samples `journal` every `every_ms` of journal time, from its first event (or from the
/// snapshot retention cut at) to its last.
pub fn timeline(journal: &Journal<DomainEvent>, every_ms: i64) -> anyhow::Result<Timeline> {
    let every_ms = every_ms.max(1);
    let first = journal.first_seq()?.unwrap_or(1);
    let time_of = |seq: u64| -> anyhow::Result<Option<i64>> {
        Ok(journal
            .read_raw_from(seq)
            .next()
            .transpose()?
            .map(|r| r.recorded_at_ms))
    };
    let span = match (time_of(first)?, journal.last_seq()?) {
        (Some(start), Some(last)) => time_of(last)?.unwrap_or(start) - start,
        _ => 0,
    };
    // Whole sampling intervals, so the rounds fall on the points.
    let scratch_every = (span / SCRATCH_POINTS / every_ms + 1) * every_ms;
    let mut recorded = Recorded::default();
    let mut next_scratch: Option<i64> = None;
    // History before `first` was trimmed at a checkpoint snapshot: start from that state.
    let mut view = if first > 1 {
        journal
            .replay::<ClusterView>(Until::Seq(first - 1))
            .with_context(|| format!("the state before seq {first}, where the journal now starts"))?
            .state
    } else {
        ClusterView::default()
    };
    let mut out = Timeline {
        first_seq: first,
        ..Timeline::default()
    };
    let mut disrupted: BTreeMap<String, u64> = BTreeMap::new();
    let mut next: Option<i64> = None;
    let mut last_at = None;
    for envelope in journal.read_from(first) {
        let envelope = envelope?;
        let at = envelope.recorded_at_ms;
        let due = next.get_or_insert(at);
        while *due <= at {
            out.points.push(point(&view, *due, &disrupted));
            let scratch_due = next_scratch.get_or_insert(*due);
            if *scratch_due <= *due {
                out.scratch.extend(recorded.scratch(&view, *due));
                *scratch_due += scratch_every;
            }
            *due += every_ms;
        }
        recorded.observe(&envelope.event);
        if let DomainEvent::NodeClaimDraining { reason, .. } = &envelope.event {
            *disrupted.entry(reason.clone()).or_default() += 1;
        }
        view.apply(&envelope);
        last_at = Some(at);
    }
    if let Some(at) = last_at
        && out.points.last().is_none_or(|p| p.at_ms < at)
    {
        out.points.push(point(&view, at, &disrupted));
        out.scratch.extend(recorded.scratch(&view, at));
    }
    for p in &out.points {
        out.capacity_types.extend(p.nodes.keys().cloned());
        out.reasons.extend(p.disrupted.keys().cloned());
    }
    Ok(out)
}
