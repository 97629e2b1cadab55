//! The view's long-run bookkeeping: which instance-type sets must outlive a retention cut,
//! and forgetting what ended long ago.
#![allow(clippy::unwrap_used)]

use karpenter_journal::{Envelope, JournalEvent as _, Projection as _};

use super::*;
use crate::events::{PoolInput, RoundInput, RoundRecord};
use crate::model::Resources;

const HOUR: i64 = 3600 * 1000;

fn apply(view: &mut ClusterView, seq: u64, at_ms: i64, event: DomainEvent) {
    view.apply(&Envelope {
        seq,
        recorded_at_ms: at_ms,
        entity: event.entity(),
        event_type: event.event_type().to_owned(),
        schema_version: 1,
        event,
    });
}

fn observed(digest: &str) -> DomainEvent {
    DomainEvent::InstanceTypesObserved {
        digest: digest.into(),
        instance_types: Vec::new(),
    }
}

fn round(round: u64, catalogs: Option<&[&str]>) -> DomainEvent {
    let input = catalogs.map(|catalogs| {
        Box::new(RoundInput {
            pods: Vec::new(),
            nodepools: catalogs
                .iter()
                .map(|c| PoolInput {
                    name: format!("pool-{c}"),
                    weight: 0,
                    requirements: Default::default(),
                    taints: Vec::new(),
                    limits: Default::default(),
                    usage: Resources::ZERO,
                    node_count: 0,
                    catalog: (*c).into(),
                    replicas: None,
                })
                .collect(),
            existing: Vec::new(),
            daemonsets: Vec::new(),
            preference_policy: Default::default(),
            min_values_policy: Default::default(),
            namespace_labels: Default::default(),
        })
    });
    DomainEvent::RoundCompleted(Box::new(RoundRecord {
        round,
        pods: 0,
        bindings: Vec::new(),
        nodeclaims: Vec::new(),
        unschedulable: Vec::new(),
        duration_us: 1,
        repeats: input.is_none().then_some(round - 1),
        input,
    }))
}

#[test]
fn a_catalog_a_later_round_or_the_scheduler_still_uses_outlives_a_cut() {
    let mut view = ClusterView::default();
    apply(&mut view, 1, 0, observed("a"));
    apply(&mut view, 2, 0, observed("b"));
    apply(&mut view, 3, HOUR, round(1, Some(&["a"])));
    // A round that repeats round 1 used round 1's catalogs.
    apply(&mut view, 8, 10 * HOUR, round(2, None));
    assert_eq!(view.catalogs["a"].last_used_seq, 8);
    assert_eq!(view.catalogs["b"].last_used_seq, 2);

    // A cut at 5: "a" is used after it, "b" is not.
    let none = std::collections::BTreeSet::new();
    assert_eq!(view.catalogs_to_carry(5, &none), vec![("a".to_owned(), 1)]);
    // A cut past every use: only what the scheduler counts on is carried.
    assert!(view.catalogs_to_carry(9, &none).is_empty());
    let remembered = ["b".to_owned()].into();
    assert_eq!(
        view.catalogs_to_carry(9, &remembered),
        vec![("b".to_owned(), 2)]
    );
    // What a restarted scheduler may take as recorded.
    assert_eq!(
        view.recent_catalogs(10 * HOUR + 1, HOUR)
            .keys()
            .collect::<Vec<_>>(),
        vec!["a"]
    );

    // The copy carried past the cut, then the cut: "b" is gone, "a" is at its new place.
    apply(&mut view, 10, 10 * HOUR, observed("a"));
    apply(
        &mut view,
        11,
        10 * HOUR,
        DomainEvent::JournalTrimmed {
            through: 5,
            events: 5,
            bytes: 100,
        },
    );
    assert_eq!(view.catalogs.keys().collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(view.catalogs["a"].recorded_seq, 10);
}

#[test]
fn what_ended_a_day_ago_is_forgotten() {
    let mut view = ClusterView::default();
    let plan = |name: &str| {
        DomainEvent::NodeClaimPlanned(Box::new(NodeClaimPlan {
            nodeclaim: name.into(),
            nodepool: "default".into(),
            round: 1,
            pods: vec!["u1".into()],
            requests: Default::default(),
            instance_types: Vec::new(),
            min_values_relaxed: false,
        }))
    };
    let terminated = |nodeclaim: String| DomainEvent::NodeClaimTerminated {
        nodeclaim,
        reason: "empty".into(),
    };
    apply(&mut view, 1, 0, plan("old"));
    apply(&mut view, 2, 0, plan("live"));
    apply(&mut view, 3, HOUR, terminated("old".into()));
    assert_eq!(view.ended_at_ms.get("old"), Some(&HOUR));
    apply(&mut view, 4, 20 * HOUR, plan("young"));
    assert!(
        view.nodeclaims.contains_key("old"),
        "ended less than a day ago"
    );
    apply(&mut view, 5, 26 * HOUR, terminated("young".into()));
    assert!(
        !view.nodeclaims.contains_key("old"),
        "ended more than a day ago"
    );
    assert!(view.nodeclaims.contains_key("young"));
    assert!(view.nodeclaims.contains_key("live"));
}

#[test]
fn a_view_folded_from_a_snapshot_equals_one_folded_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let journal: karpenter_journal::Journal<DomainEvent> =
        karpenter_journal::Journal::open(dir.path()).unwrap();
    let events = [
        observed("a"),
        round(1, Some(&["a"])),
        round(2, None),
        observed("b"),
        round(3, Some(&["a", "b"])),
    ];
    for (i, event) in events.iter().enumerate() {
        journal.append(event).unwrap();
        if i == 2 {
            let view = journal
                .replay::<ClusterView>(karpenter_journal::Until::End)
                .unwrap();
            journal
                .save_snapshot(view.last_seq, ClusterView::SNAPSHOT_VERSION, &view.state)
                .unwrap();
        }
    }
    let from_snapshot = journal
        .replay::<ClusterView>(karpenter_journal::Until::End)
        .unwrap();
    assert_eq!(from_snapshot.from_snapshot, Some(3));
    let mut from_start = ClusterView::default();
    for envelope in journal.read_from(0) {
        from_start.apply(&envelope.unwrap());
    }
    assert_eq!(from_snapshot.state, from_start);
    let mut raw = ClusterView::default();
    for record in journal.read_raw_from(0) {
        raw.apply_raw(record.unwrap()).unwrap();
    }
    assert_eq!(
        raw, from_start,
        "folded without decoding the instance types"
    );
    assert_eq!(raw.catalogs["b"].recorded_seq, 4);
    // Its payload is not even read: where it is is all the view keeps.
    let mut unread = journal.read_raw_from(4).next().unwrap().unwrap();
    (unread.seq, unread.name, unread.payload) = (9, "c".into(), b"not read".to_vec());
    raw.apply_raw(unread.clone()).unwrap();
    assert_eq!(raw.catalogs["c"].recorded_seq, 9);
    unread.event_type = "RoundCompleted".into();
    assert!(raw.apply_raw(unread).is_err(), "other payloads are decoded");
}
