//! Stored-schema tests: every event round-trips, version 1 payloads stay readable (golden
//! file), and replaying through the journal equals applying live.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use karpenter_journal::{Journal, JournalEvent, Projection, Until};

use super::*;
use crate::model::CapacityType;
use crate::ports::InstanceState;

fn instance() -> Instance {
    Instance {
        id: "i-0abc".into(),
        provider_id: "aws:///us-east-1a/i-0abc".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        price: 0.0351,
        image_id: "ami-0123".into(),
        nodeclaim: "default-x7k2p".into(),
        nodepool: "default".into(),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    }
}

/// One of each event, as the golden file holds them.
fn samples() -> Vec<DomainEvent> {
    let requests: BTreeMap<String, String> = [
        ("cpu".to_owned(), "1500m".to_owned()),
        ("memory".to_owned(), "4Gi".to_owned()),
    ]
    .into();
    vec![
        DomainEvent::NodePoolObserved {
            nodepool: "default".into(),
            weight: 10,
            hash: "1234".into(),
        },
        DomainEvent::PodPending {
            uid: "u1".into(),
            pod: "web/web-1".into(),
            requests: requests.clone(),
        },
        DomainEvent::RoundCompleted(Box::new(RoundRecord {
            round: 1,
            pods: 2,
            bindings: vec![("u2".into(), "node-1".into())],
            nodeclaims: vec!["default-x7k2p".into()],
            unschedulable: vec![(
                "u3".into(),
                "nodepool \"default\": untolerated taint a:NoSchedule".into(),
            )],
            duration_us: 1234,
            input: None,
            repeats: None,
        })),
        DomainEvent::NodeClaimPlanned(Box::new(NodeClaimPlan {
            nodeclaim: "default-x7k2p".into(),
            nodepool: "default".into(),
            round: 1,
            pods: vec!["u1".into()],
            requests,
            instance_types: vec![InstanceTypeOption {
                name: "m5.large".into(),
                price: 0.0351,
                zone: "us-east-1a".into(),
                capacity_type: CapacityType::Spot,
            }],
            min_values_relaxed: false,
        })),
        DomainEvent::LaunchRequested {
            nodeclaim: "default-x7k2p".into(),
            client_token: "default-x7k2p-1".into(),
        },
        DomainEvent::NodeClaimLaunched {
            nodeclaim: "default-x7k2p".into(),
            instance: Box::new(instance()),
        },
        DomainEvent::LaunchFailed {
            nodeclaim: "default-abcde".into(),
            reason: "insufficient capacity".into(),
            unavailable: vec![OfferingKey {
                instance_type: "c5.large".into(),
                zone: "us-east-1b".into(),
                capacity_type: CapacityType::Spot,
            }],
        },
        DomainEvent::NodeClaimRegistered {
            nodeclaim: "default-x7k2p".into(),
            node: "ip-10-0-0-1".into(),
        },
        DomainEvent::PodBound {
            uid: "u1".into(),
            node: "ip-10-0-0-1".into(),
            pod: None,
        },
        DomainEvent::NodeClaimInitialized {
            nodeclaim: "default-x7k2p".into(),
        },
        DomainEvent::InterruptionReceived {
            nodeclaim: "default-x7k2p".into(),
            instance_id: "i-0abc".into(),
            kind: InterruptionKind::SpotInterrupted,
        },
        DomainEvent::NodeClaimDraining {
            nodeclaim: "default-x7k2p".into(),
            reason: "spot_interrupted".into(),
        },
        DomainEvent::PodDeleted { uid: "u1".into() },
        DomainEvent::NodeClaimTerminated {
            nodeclaim: "default-x7k2p".into(),
            reason: "spot_interrupted".into(),
        },
        DomainEvent::InterruptionMessage {
            queue: "karpenter-interruptions".into(),
            message_id: "m-1".into(),
            outcome: MessageOutcome::Notice,
            kind: Some(InterruptionKind::RebalanceRecommendation),
            instance_ids: vec!["i-0abc".into()],
            detail: String::new(),
        },
        DomainEvent::InterruptionMessage {
            queue: "karpenter-interruptions".into(),
            message_id: "m-2".into(),
            outcome: MessageOutcome::Malformed,
            kind: None,
            instance_ids: vec![],
            detail: "not an EventBridge event".into(),
        },
        DomainEvent::InstanceGarbageCollected {
            instance_id: "i-0def".into(),
            nodeclaim: "default-zz9".into(),
            reason: "no NodeClaim owns it".into(),
        },
        DomainEvent::NominationExpired {
            uid: "u2".into(),
            nodeclaim: "default-x7k2p".into(),
            node: "ip-10-0-1-5.ec2.internal".into(),
        },
        DomainEvent::NodeClaimTerminating {
            nodeclaim: "default-x7k2p".into(),
            reason: "registration_timeout".into(),
        },
        nominations_checked(),
    ]
}

/// A nomination check (added after the first release, so its golden line comes last).
fn nominations_checked() -> DomainEvent {
    use crate::events::nominations::*;
    use crate::model::{Taint, Toleration};
    DomainEvent::NominationsChecked(Box::new(NominationRecord {
        check: NominationCheck {
            at_ms: 1_767_225_660_000,
            window_ms: 20_000,
            nodes: vec![
                NodeFacts {
                    name: "ip-10-0-1-5.ec2.internal".into(),
                    provider_id: "aws:///us-east-1a/i-0abc".into(),
                    ready: true,
                    unschedulable: false,
                    taints: Vec::new(),
                },
                NodeFacts {
                    name: "ip-10-0-2-7.ec2.internal".into(),
                    provider_id: "aws:///us-east-1b/i-0bcd".into(),
                    ready: true,
                    unschedulable: false,
                    taints: vec![Taint {
                        key: "dedicated".into(),
                        value: "gpu".into(),
                        effect: "NoSchedule".into(),
                    }],
                },
            ],
            claims: vec![NominatedClaim {
                nodeclaim: "default-x7k2p".into(),
                provider_id: "aws:///us-east-1a/i-0abc".into(),
                pods: vec![NominatedPod {
                    uid: "u2".into(),
                    tolerations: vec![Toleration {
                        key: "dedicated".into(),
                        exists: true,
                        value: String::new(),
                        effect: "NoSchedule".into(),
                    }],
                }],
                open_since_ms: Some(1_767_225_640_000),
            }],
            left: vec![LeftPod {
                uid: "u4".into(),
                node: "ip-10-0-2-7.ec2.internal".into(),
                since_ms: 1_767_225_650_000,
            }],
            in_flight_elsewhere: false,
        },
        outcome: NominationOutcome {
            expired: vec![Expired {
                uid: "u2".into(),
                nodeclaim: "default-x7k2p".into(),
                node: "ip-10-0-1-5.ec2.internal".into(),
            }],
            open_since: Default::default(),
            left_since: [("u4".to_owned(), 1_767_225_650_000)].into(),
        },
    }))
}

/// The recorded outcome of the golden nomination check is what the check decides.
#[test]
fn the_golden_nomination_check_decides_what_it_recorded() {
    let DomainEvent::NominationsChecked(record) = nominations_checked() else {
        unreachable!()
    };
    assert_eq!(
        crate::provisioning::nominations::check(&record.check),
        record.outcome
    );
}

#[test]
fn every_event_round_trips_through_its_stored_form() {
    for event in samples() {
        let payload = event.to_payload().unwrap();
        let back =
            DomainEvent::from_payload(event.event_type(), DomainEvent::SCHEMA_VERSION, &payload)
                .unwrap();
        assert_eq!(back, Some(event));
    }
}

#[test]
fn version_1_payloads_stay_readable() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/events-v1.jsonl");
    if std::env::var_os("KARPENTER_WRITE_GOLDEN").is_some() && !std::path::Path::new(path).exists()
    {
        // Only ever creates the file: version 1 goldens are never rewritten.
        let lines: Vec<String> = samples()
            .iter()
            .map(|e| String::from_utf8(e.to_payload().unwrap()).unwrap())
            .collect();
        std::fs::write(path, lines.join("\n") + "\n").unwrap();
    }
    let golden = std::fs::read_to_string(path).expect("golden file tests/golden/events-v1.jsonl");
    let lines: Vec<&str> = golden.lines().collect();
    let samples = samples();
    assert_eq!(lines.len(), samples.len(), "one golden line per event type");
    for (line, event) in lines.iter().zip(&samples) {
        let decoded = DomainEvent::from_payload(event.event_type(), 1, line.as_bytes()).unwrap();
        assert_eq!(
            decoded.as_ref(),
            Some(event),
            "golden line no longer decodes to the same event"
        );
        assert_eq!(
            String::from_utf8(event.to_payload().unwrap()).unwrap(),
            *line,
            "version 1 encoding changed"
        );
    }
    assert!(
        DomainEvent::from_payload("PodBound", 2, b"{}")
            .unwrap_err()
            .contains("unknown schema version 2")
    );
}

/// `PodBound.pod` came after the first release: version 1 payloads without it still read,
/// and payloads with it are version 1 payloads with one more field.
#[test]
fn the_pod_name_of_a_binding_is_an_additive_field() {
    let old = br#"{"type":"PodBound","uid":"u1","node":"n1"}"#;
    let read = DomainEvent::from_payload("PodBound", 1, old).unwrap();
    assert_eq!(
        read,
        Some(DomainEvent::PodBound {
            uid: "u1".into(),
            node: "n1".into(),
            pod: None
        })
    );
    let named = DomainEvent::PodBound {
        uid: "u1".into(),
        node: "n1".into(),
        pod: Some("default/web-1".into()),
    };
    let payload = named.to_payload().unwrap();
    assert_eq!(
        String::from_utf8(payload.clone()).unwrap(),
        r#"{"type":"PodBound","uid":"u1","node":"n1","pod":"default/web-1"}"#
    );
    assert_eq!(
        DomainEvent::from_payload("PodBound", 1, &payload).unwrap(),
        Some(named)
    );
}

#[test]
fn replay_through_the_journal_equals_live_application() {
    let dir = tempfile::tempdir().unwrap();
    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let mut live = ClusterView::default();
    for event in samples() {
        let seq = journal.append(&event).unwrap();
        let envelope = journal.read_from(seq).next().unwrap().unwrap();
        live.apply(&envelope);
    }
    let replayed = journal.replay::<ClusterView>(Until::End).unwrap().state;
    assert_eq!(replayed, live);
    let claim = &replayed.nodeclaims["default-x7k2p"];
    assert_eq!(claim.state, NodeClaimState::Terminated);
    assert_eq!(claim.ended.as_deref(), Some("spot_interrupted"));
    assert_eq!(replayed.cost_per_hour(), 0.0);
    // Halfway through, the claim was initialized and its instance cost money.
    let midway = journal.replay::<ClusterView>(Until::Seq(10)).unwrap().state;
    assert_eq!(
        midway.nodeclaims["default-x7k2p"].state,
        NodeClaimState::Initialized
    );
    assert!((midway.cost_per_hour() - 0.0351).abs() < 1e-9);
    assert_eq!(
        midway.bound.get("u1").map(String::as_str),
        Some("ip-10-0-0-1")
    );
}

#[test]
fn a_rounds_static_pools_are_recorded_and_rebuilt_as_static() {
    let template = |name: &str| NodePoolTemplate {
        name: name.into(),
        weight: 0,
        requirements: Requirements::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        instance_types: Vec::new(),
        limits: Limits::default(),
        usage: Resources::ZERO,
        node_count: 2,
    };
    let input = SchedulingInput {
        nodepools: vec![template("dynamic")],
        static_pools: vec![StaticPool {
            template: template("static"),
            replicas: 5,
        }],
        ..Default::default()
    };
    let recorded = RoundInput::record(&input, &["d".to_owned(), "s".to_owned()]);
    let event = DomainEvent::RoundCompleted(Box::new(RoundRecord {
        round: 1,
        pods: 0,
        bindings: Vec::new(),
        nodeclaims: Vec::new(),
        unschedulable: Vec::new(),
        duration_us: 0,
        input: Some(Box::new(recorded)),
        repeats: None,
    }));
    let payload = stored::encode(&event).unwrap();
    let Some(DomainEvent::RoundCompleted(read)) =
        stored::decode(event.type_name(), 1, &payload).unwrap()
    else {
        panic!("not a round");
    };
    let catalogs = [("d".to_owned(), Vec::new()), ("s".to_owned(), Vec::new())].into();
    let rebuilt = read.input.unwrap().rebuild(&catalogs).unwrap();
    assert_eq!(rebuilt.nodepools.len(), 1);
    assert_eq!(rebuilt.static_pools.len(), 1);
    assert_eq!(rebuilt.static_pools[0].replicas, 5);
    assert_eq!(rebuilt.static_pools[0].template.name, "static");
}
