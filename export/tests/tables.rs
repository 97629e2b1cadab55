//! The tables from a short, hand-written history across midnight: a pod waiting for a new
//! node, a NodeClaim removed by an emptiness command, the fleet's dollars equal to the
//! NodeClaims' costs, and the three figures; then written as Parquet and read back.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;

use karpenter_core::events::disruption::{DisruptionRecord, Member, Method, Phase};
use karpenter_core::events::{DomainEvent, NodeClaimPlan, RoundRecord};
use karpenter_core::model::CapacityType;
use karpenter_core::ports::{Instance, InstanceState};
use karpenter_export::figures::{longest_waits, savings_by_reason, spend_by_day};
use karpenter_export::rows::Projector;
use karpenter_journal::{EntityRef, Envelope};

/// 2026-01-01T23:50:00Z.
const T0: i64 = 1_767_311_400_000;
const S: i64 = 1000;

fn at(seconds: i64, event: DomainEvent) -> Envelope<DomainEvent> {
    Envelope {
        seq: 0,
        recorded_at_ms: T0 + seconds * S,
        entity: EntityRef::new("x", "y"),
        event_type: event.type_name().to_owned(),
        schema_version: 1,
        event,
    }
}

fn instance(claim: &str, price: f64, capacity: CapacityType) -> Box<Instance> {
    Box::new(Instance {
        id: format!("i-{claim}"),
        provider_id: format!("aws:///us-west-2a/i-{claim}"),
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        capacity_type: capacity,
        price,
        image_id: "ami-1".into(),
        nodeclaim: claim.into(),
        nodepool: "general".into(),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    })
}

fn plan(claim: &str, round: u64, pods: &[&str]) -> DomainEvent {
    DomainEvent::NodeClaimPlanned(Box::new(NodeClaimPlan {
        nodeclaim: claim.into(),
        nodepool: "general".into(),
        round,
        pods: pods.iter().map(|p| p.to_string()).collect(),
        requests: BTreeMap::new(),
        instance_types: Vec::new(),
        min_values_relaxed: false,
    }))
}

fn history() -> Vec<Envelope<DomainEvent>> {
    let pending = |uid: &str| DomainEvent::PodPending {
        uid: uid.into(),
        pod: format!("default/{uid}"),
        requests: BTreeMap::new(),
    };
    vec![
        at(0, pending("p1")),
        at(0, pending("p2")),
        at(
            2,
            DomainEvent::RoundCompleted(Box::new(RoundRecord {
                round: 1,
                pods: 2,
                bindings: Vec::new(),
                nodeclaims: vec!["a".into()],
                unschedulable: vec![("p2".into(), "no instance type fits".into())],
                duration_us: 900,
                input: None,
                repeats: None,
            })),
        ),
        at(2, plan("a", 1, &["p1"])),
        at(
            10,
            DomainEvent::NodeClaimLaunched {
                nodeclaim: "a".into(),
                instance: instance("a", 0.096, CapacityType::OnDemand),
            },
        ),
        at(
            20,
            DomainEvent::NodeClaimRegistered {
                nodeclaim: "a".into(),
                node: "node-a".into(),
            },
        ),
        at(
            30,
            DomainEvent::NodeClaimInitialized {
                nodeclaim: "a".into(),
            },
        ),
        at(
            35,
            DomainEvent::PodBound {
                uid: "p1".into(),
                node: "node-a".into(),
                pod: None,
            },
        ),
        // A second node at 23:55 for ten minutes, across midnight.
        at(300, plan("b", 2, &[])),
        at(
            300,
            DomainEvent::NodeClaimLaunched {
                nodeclaim: "b".into(),
                instance: instance("b", 0.5, CapacityType::Spot),
            },
        ),
        at(
            900,
            DomainEvent::NodeClaimTerminated {
                nodeclaim: "b".into(),
                reason: "deleted".into(),
            },
        ),
        // p1 leaves; node a is empty and removed by command 1.
        at(1000, DomainEvent::PodDeleted { uid: "p1".into() }),
        at(
            1100,
            DomainEvent::DisruptionDecided(Box::new(DisruptionRecord {
                command: 1,
                method: Method::Emptiness,
                candidates: vec![Member {
                    nodeclaim: "a".into(),
                    node: Some("node-a".into()),
                }],
                replacements: Vec::new(),
                moved: Vec::new(),
                savings: 0.096,
                allowed: BTreeMap::new(),
                input: None,
            })),
        ),
        at(
            1105,
            DomainEvent::NodeClaimDraining {
                nodeclaim: "a".into(),
                reason: "Empty".into(),
            },
        ),
        at(
            1200,
            DomainEvent::NodeClaimTerminated {
                nodeclaim: "a".into(),
                reason: "disrupted (Emptiness)".into(),
            },
        ),
        at(
            1200,
            DomainEvent::DisruptionProgressed {
                command: 1,
                phase: Phase::Done,
            },
        ),
    ]
}

fn tables() -> karpenter_export::Tables {
    let mut projector = Projector::default();
    for envelope in history() {
        projector.observe(&envelope);
    }
    projector.finish()
}

#[test]
fn a_pod_waits_for_its_new_node_and_an_emptiness_command_removes_it() {
    let t = tables();
    let a = t.nodeclaims.iter().find(|c| c.nodeclaim == "a").unwrap();
    assert_eq!(a.round, Some(1));
    assert_eq!(a.launched_at, Some(T0 + 10 * S));
    assert_eq!(a.initialized_at, Some(T0 + 30 * S));
    assert_eq!(a.disruption_command, Some(1));
    assert_eq!(a.disruption_reason.as_deref(), Some("Empty"));
    assert_eq!(a.end_reason.as_deref(), Some("disrupted (Emptiness)"));
    assert!((a.running_hours - 1190.0 / 3600.0).abs() < 1e-12);

    let p1 = t.pods.iter().find(|p| p.uid == "p1").unwrap();
    assert_eq!((p1.outcome.as_str(), p1.wait_seconds), ("bound", 35.0));
    assert!(p1.new_node);
    assert_eq!(p1.nodeclaim.as_deref(), Some("a"));
    assert_eq!(
        p1.why,
        "waited for a new node: NodeClaim a (m5.large on-demand) planned +2s, launched +10s, registered +20s, initialized +30s"
    );
    // p2 never found room: pending until the last event, with the round's reason.
    let p2 = t.pods.iter().find(|p| p.uid == "p2").unwrap();
    assert_eq!((p2.outcome.as_str(), p2.wait_seconds), ("pending", 1200.0));
    assert_eq!(p2.rounds, 1);
    assert!(
        p2.why
            .starts_with("unschedulable (last: no instance type fits)"),
        "{}",
        p2.why
    );

    let waits: Vec<&str> = longest_waits(&t, 10)
        .iter()
        .map(|w| w.uid.as_str())
        .collect();
    assert_eq!(waits, ["p2", "p1"]);
    let savings = savings_by_reason(&t);
    assert_eq!(savings.len(), 1);
    assert_eq!(
        (
            savings[0].reason.as_str(),
            savings[0].commands,
            savings[0].nodeclaims
        ),
        ("Empty", 1, 1)
    );
    assert_eq!(t.disruptions[0].candidates_cost_per_hour, 0.096);
}

#[test]
fn the_fleet_splits_at_midnight_and_adds_up_to_the_nodeclaims_costs() {
    let t = tables();
    let days = spend_by_day(&t);
    assert_eq!(
        days.iter().map(|d| d.day.as_str()).collect::<Vec<_>>(),
        ["2026-01-01", "2026-01-02"]
    );
    // 23:50:00 to midnight, then 00:00 to 00:10.
    assert!((days[0].hours - 600.0 / 3600.0).abs() < 1e-12);
    assert!((days[1].hours - 600.0 / 3600.0).abs() < 1e-12);
    // b: 0.5 $/h from 23:55 to 00:05 (five minutes each side); a: 0.096 $/h from +10s.
    let day1 = 0.096 * 590.0 / 3600.0 + 0.5 * 300.0 / 3600.0;
    assert!((days[0].dollars - day1).abs() < 1e-12, "{days:?}");
    let fleet: f64 = days.iter().map(|d| d.dollars).sum();
    let claims: f64 = t.nodeclaims.iter().map(|c| c.cost).sum();
    assert!((fleet - claims).abs() < 1e-12, "{fleet} vs {claims}");
    assert!(t.fleet.iter().all(|r| r.to_at > r.from_at));
    let spot = t.fleet.iter().find(|r| r.spot_nodes == 1).unwrap();
    assert_eq!(spot.nodes, 2);
}

#[test]
fn the_files_hold_every_row_under_their_cluster_and_day() {
    let t = tables();
    let dir = tempfile::tempdir().unwrap();
    let written =
        karpenter_export::parquet::write(&t, "prod-eu", range(1, 16), dir.path()).unwrap();
    assert_eq!(written.rows["pods"], 2);
    let fleet_files: Vec<_> = written
        .files
        .iter()
        .filter(|f| f.starts_with(dir.path().join("fleet")))
        .collect();
    assert_eq!(fleet_files.len(), 2, "{fleet_files:?}");
    assert!(
        fleet_files[1].ends_with("fleet/cluster=prod-eu/day=2026-01-02/seq-1-16.parquet"),
        "{fleet_files:?}"
    );
    // Read back: every row, every column.
    let mut rows = 0;
    for file in &written.files {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(file).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            if file.starts_with(dir.path().join("pods")) {
                rows += batch.num_rows();
                assert_eq!(batch.schema().field(0).name(), "uid");
            }
        }
    }
    assert_eq!(rows, 2);
    // A second export of the same journal replaces its files; nothing partial is left.
    karpenter_export::parquet::write(&t, "prod-eu", range(1, 16), dir.path()).unwrap();
    let partial = walk(dir.path())
        .into_iter()
        .filter(|p| p.ends_with(".partial"))
        .count();
    assert_eq!(partial, 0);
    assert_eq!(walk(dir.path()).len(), written.files.len());

    // The same journal grown: its export replaces the shorter one's files, so no row is
    // counted twice; another cluster's files and a disjoint range's are kept.
    let other = karpenter_export::parquet::write(&t, "prod-us", range(1, 16), dir.path()).unwrap();
    let grown = karpenter_export::parquet::write(&t, "prod-eu", range(1, 20), dir.path()).unwrap();
    assert_eq!(grown.replaced.len(), written.files.len(), "{grown:?}");
    let later = karpenter_export::parquet::write(&t, "prod-eu", range(21, 30), dir.path()).unwrap();
    assert!(later.replaced.is_empty(), "{later:?}");
    let mut expected: Vec<String> = [&other.files, &grown.files, &later.files]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect();
    expected.sort();
    assert_eq!(walk(dir.path()), expected);
    assert!(
        expected
            .iter()
            .all(|p| !p.contains("seq-1-16") || p.contains("prod-us"))
    );

    // An export holding only some of an earlier one's records would lose the rest: refused,
    // and nothing is written.
    let error = karpenter_export::parquet::write(&t, "prod-eu", range(10, 25), dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("holds records 1–20") && error.contains("10–25"),
        "{error}"
    );
    assert!(error.contains("s3://"), "{error}");
    assert_eq!(walk(dir.path()), expected);

    let error = karpenter_export::parquet::write(&t, "../x", range(1, 1), dir.path()).unwrap_err();
    assert!(error.to_string().contains("cluster name"), "{error}");
}

fn range(first: u64, last: u64) -> karpenter_export::parquet::Range {
    karpenter_export::parquet::Range { first, last }
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out.sort();
    out
}
