//! The stored schema's law for the disruption events: every decided command (with the
//! snapshot and round it was decided from) and every phase reads back as written.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;

use super::tests::{capacity_type, name, pod, round_input};
use super::{decode, encode};
use crate::api::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};
use crate::events::DomainEvent;
use crate::events::NodeClaimState;
use crate::events::disruption::{
    CommandRole, DisruptionInput, DisruptionRecord, DriftMark, Member, Method, NodeSnapshot, Phase,
    PoolPolicy, Snapshot,
};
use crate::ports::{BoundPod, OfferingKey};

fn ms() -> impl Strategy<Value = Duration> {
    (0u64..1 << 40).prop_map(Duration::from_millis)
}

fn budget() -> impl Strategy<Value = Budget> {
    (
        prop::sample::select(vec!["10%", "0", "3", "100%"]),
        prop::option::of(prop::sample::select(vec!["@daily", "0 9 * * 1-5"])),
        prop::option::of(prop::sample::select(vec!["8h", "30m"])),
        prop::collection::vec(
            prop::sample::select(vec![
                DisruptionReason::Empty,
                DisruptionReason::Drifted,
                DisruptionReason::Underutilized,
            ]),
            0..3,
        ),
    )
        .prop_map(|(nodes, schedule, duration, reasons)| Budget {
            nodes: nodes.into(),
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
            reasons,
        })
}

fn pool() -> impl Strategy<Value = PoolPolicy> {
    (
        name(),
        prop::collection::vec(budget(), 0..3),
        prop::option::of(ms()),
        prop::sample::select(vec![
            ConsolidationPolicy::WhenEmpty,
            ConsolidationPolicy::WhenEmptyOrUnderutilized,
            ConsolidationPolicy::Balanced,
        ]),
        prop::option::of(0i64..1000),
        prop::option::of(0i64..1000),
    )
        .prop_map(
            |(name, budgets, consolidate_after, policy, replicas, node_limit)| PoolPolicy {
                name,
                budgets,
                consolidate_after,
                policy,
                replicas,
                node_limit,
            },
        )
}

fn bound_pod() -> impl Strategy<Value = BoundPod> {
    (
        name(),
        pod(),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["true", "10m"])),
        prop::option::of(any::<i64>()),
        prop::collection::vec(name(), 0..2),
    )
        .prop_map(
            |(node, pod, reschedulable, do_not_disrupt, created_ms, pdbs)| BoundPod {
                node,
                pod,
                reschedulable,
                do_not_disrupt: do_not_disrupt.map(Into::into),
                created_ms,
                pdbs,
            },
        )
}

fn node() -> impl Strategy<Value = NodeSnapshot> {
    (
        (name(), name(), prop::option::of(name())),
        prop::sample::select(vec![
            NodeClaimState::Pending,
            NodeClaimState::Initialized,
            NodeClaimState::Draining,
        ]),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::option::of(prop::sample::select(vec![
            CommandRole::Candidate,
            CommandRole::Replacement,
        ])),
        (
            any::<i64>(),
            prop::option::of(any::<i64>()),
            prop::option::of(any::<i64>()),
        ),
        (prop::option::of(ms()), prop::option::of(ms())),
        prop::option::of((name(), any::<i64>())),
        (
            0.0f64..100.0,
            prop::option::of((name(), name(), capacity_type())),
            prop::collection::vec(bound_pod(), 0..2),
            prop::collection::vec((name(), name(), any::<i64>()), 0..2),
        ),
    )
        .prop_map(
            |(
                names,
                state,
                flags,
                command,
                times,
                lifetimes,
                drifted,
                (price, offering, pods, conditions),
            )| {
                NodeSnapshot {
                    nodeclaim: names.0,
                    nodepool: names.1,
                    node: names.2,
                    state,
                    ready: flags.0,
                    command,
                    nominated: flags.1,
                    do_not_disrupt: flags.2,
                    created_ms: times.0,
                    initialized_ms: times.1,
                    last_pod_event_ms: times.2,
                    expire_after: lifetimes.0,
                    termination_grace_period: lifetimes.1,
                    drifted: drifted.map(|(reason, since_ms)| DriftMark { reason, since_ms }),
                    price,
                    offering: offering.map(|(instance_type, zone, capacity_type)| OfferingKey {
                        instance_type,
                        zone,
                        capacity_type,
                    }),
                    pods,
                    conditions: conditions
                        .into_iter()
                        .map(|(type_, status, since_ms)| crate::ports::NodeCondition {
                            type_,
                            status,
                            since_ms,
                        })
                        .collect(),
                }
            },
        )
}

fn event() -> impl Strategy<Value = DomainEvent> {
    let snapshot = (
        any::<i64>(),
        prop::collection::vec(pool(), 0..3),
        prop::collection::vec(node(), 0..3),
        prop::collection::btree_map(name(), -2i32..5, 0..2),
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::btree_set(name(), 0..2),
            prop::option::of(prop::collection::btree_map(name(), any::<u64>(), 0..3)),
            prop::collection::btree_set(name(), 0..2),
        ),
    )
        .prop_map(
            |(
                now_ms,
                pools,
                nodes,
                pdbs,
                (spot_to_spot, static_capacity, buffered, repair, scaling_out),
            )| {
                Snapshot {
                    now_ms,
                    pools,
                    nodes,
                    pdbs,
                    spot_to_spot,
                    static_capacity,
                    buffered,
                    repair,
                    scaling_out,
                }
            },
        );
    let input = prop::option::of(
        (
            snapshot,
            prop::option::of(round_input()),
            prop::collection::btree_set(name(), 0..3),
        )
            .prop_map(|(snapshot, base, unconsolidatable)| {
                Box::new(DisruptionInput {
                    snapshot,
                    base,
                    unconsolidatable,
                })
            }),
    );
    let record = (
        any::<u64>(),
        prop::sample::select(Method::ALL.to_vec()),
        prop::collection::vec((name(), prop::option::of(name())), 1..3),
        prop::collection::vec(name(), 0..2),
        prop::collection::vec(name(), 0..3),
        -5.0f64..5.0,
        prop::collection::btree_map(name(), 0usize..10, 0..3),
        input,
    )
        .prop_map(
            |(command, method, candidates, replacements, moved, savings, allowed, input)| {
                DomainEvent::DisruptionDecided(Box::new(DisruptionRecord {
                    command,
                    method,
                    candidates: candidates
                        .into_iter()
                        .map(|(nodeclaim, node)| Member { nodeclaim, node })
                        .collect(),
                    replacements,
                    moved,
                    savings,
                    allowed,
                    input,
                }))
            },
        );
    let phase = (
        any::<u64>(),
        prop::sample::select(vec![
            Phase::WaitingReadiness,
            Phase::Terminating,
            Phase::Done,
            Phase::Abandoned("replacement r is gone".into()),
        ]),
    )
        .prop_map(|(command, phase)| DomainEvent::DisruptionProgressed { command, phase });
    prop_oneof![record, phase]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_disruption_event_reads_back_as_written(event in event()) {
        let payload = encode(&event).unwrap();
        let back = decode(event.type_name(), super::CURRENT, &payload).unwrap();
        prop_assert_eq!(back.as_ref(), Some(&event));
    }
}

#[test]
fn a_disruption_payload_that_cannot_be_read_names_the_command_and_field() {
    let error = decode(
        "DisruptionDecided",
        1,
        br#"{"type":"DisruptionDecided","command":7,"method":"Shuffle","candidates":[],"savings":0.0,"allowed":{}}"#,
    )
    .unwrap_err();
    assert!(
        error.contains("command 7") && error.contains("Shuffle"),
        "{error}"
    );
    let error = decode(
        "DisruptionProgressed",
        1,
        br#"{"type":"DisruptionProgressed","command":7,"phase":"Sideways"}"#,
    )
    .unwrap_err();
    assert!(error.contains("Sideways"), "{error}");
}

/// `JournalTrimmed` is an additive version 1 type; its payload stays as written here.
#[test]
fn a_trim_record_reads_back_and_keeps_its_version_1_form() {
    let event = DomainEvent::JournalTrimmed {
        through: 120,
        events: 119,
        bytes: 52311,
    };
    let payload = br#"{"type":"JournalTrimmed","through":120,"events":119,"bytes":52311}"#;
    assert_eq!(encode(&event).unwrap(), payload.to_vec());
    assert_eq!(decode("JournalTrimmed", 1, payload).unwrap(), Some(event));
}

/// `JournalShipped` and `HistoryTakenOver` are additive version 1 types; their payloads stay
/// as written here.
#[test]
fn shipping_and_takeover_records_read_back_and_keep_their_version_1_form() {
    use crate::events::history::{SetAside, Takeover};
    let shipped = DomainEvent::JournalShipped {
        through: 4200,
        segments: 2,
        bytes: 81_920,
    };
    let payload = br#"{"type":"JournalShipped","through":4200,"segments":2,"bytes":81920}"#;
    assert_eq!(encode(&shipped).unwrap(), payload.to_vec());
    assert_eq!(decode("JournalShipped", 1, payload).unwrap(), Some(shipped));

    let takeover = DomainEvent::HistoryTakenOver(Box::new(Takeover {
        holder: "karpenter-5d9f-2xk".into(),
        location: "s3://journals/karpenter/prod".into(),
        through: 4200,
        snapshot: Some(4000),
        imported: 200,
        segments: 1,
        set_aside: Some(SetAside {
            path: "/var/lib/karpenter/journal.set-aside-1767225600".into(),
            last: 4203,
        }),
    }));
    let payload = br#"{"type":"HistoryTakenOver","holder":"karpenter-5d9f-2xk","location":"s3://journals/karpenter/prod","through":4200,"snapshot":4000,"imported":200,"segments":1,"set_aside":{"path":"/var/lib/karpenter/journal.set-aside-1767225600","last":4203}}"#;
    assert_eq!(encode(&takeover).unwrap(), payload.to_vec());
    assert_eq!(
        decode("HistoryTakenOver", 1, payload).unwrap(),
        Some(takeover)
    );
    // Without a snapshot or a journal set aside, those fields are left out.
    let plain = br#"{"type":"HistoryTakenOver","holder":"a","location":"s3://b/c","through":3,"imported":3,"segments":1}"#;
    let Some(DomainEvent::HistoryTakenOver(t)) = decode("HistoryTakenOver", 1, plain).unwrap()
    else {
        panic!("not a takeover");
    };
    assert_eq!((t.snapshot, t.set_aside), (None, None));
}
