//! The journal keeper on the paused clock: snapshots, retention at a checkpoint, and the
//! instance-type sets later rounds refer to carried past the cut.

use std::collections::BTreeSet;

use karpenter_actors::actor::keeper::JournalKeeping;
use karpenter_journal::RetentionPolicy;

use super::*;

/// The journal on tokio's paused clock, as the simulator's is, so retention by age and the
/// keeper's interval agree.
pub(super) struct PausedClock(pub(super) tokio::time::Instant);

impl karpenter_journal::Clock for PausedClock {
    fn now_ms(&self) -> i64 {
        1_700_000_000_000 + self.0.elapsed().as_millis() as i64
    }
}

#[tokio::test(start_paused = true)]
async fn the_keeper_trims_old_history_and_keeps_what_later_rounds_refer_to() {
    let settings = Settings {
        keeping: JournalKeeping {
            snapshot_every: Duration::from_secs(60),
            checkpoint_every: Duration::from_secs(60),
            retention: RetentionPolicy {
                max_age: Some(Duration::from_secs(150)),
                max_bytes: None,
            },
        },
        ..Settings::default()
    };
    let clock = Arc::new(PausedClock(tokio::time::Instant::now()));
    let system = start_with_settings(
        "t-keeper",
        |_| None,
        vec![nodepool()],
        settings,
        Some(clock),
    )
    .await;
    // A pod a minute, so a round a minute refers to the one catalog recorded at the start.
    for i in 0..10 {
        pending(&system, &format!("p{i}"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        settle().await;
    }
    let journal = &system.journal;
    let events: Vec<_> = journal.read_from(0).map(Result::unwrap).collect();
    let trims: Vec<u64> = events
        .iter()
        .filter_map(|e| match e.event {
            DomainEvent::JournalTrimmed { through, .. } => Some(through),
            _ => None,
        })
        .collect();
    assert!(
        trims.len() >= 3,
        "a cut every pass once history is old enough: {trims:?}"
    );
    let first = journal.first_seq().unwrap().unwrap();
    assert_eq!(
        first,
        trims.last().unwrap() + 1,
        "history starts after the last cut"
    );
    // The oldest moment kept can be rebuilt: a snapshot sits right before it.
    assert!(journal.snapshot_seqs().unwrap().contains(&(first - 1)));
    assert!(journal.replay::<ClusterView>(Until::Seq(first)).is_ok());

    // Every round still stored refers to instance types the journal still holds.
    let held: BTreeSet<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            DomainEvent::InstanceTypesObserved { digest, .. } => Some(digest.clone()),
            _ => None,
        })
        .collect();
    let mut rounds = 0;
    for e in &events {
        if let DomainEvent::RoundCompleted(r) = &e.event
            && let Some(input) = &r.input
        {
            rounds += 1;
            for pool in &input.nodepools {
                assert!(
                    held.contains(&pool.catalog),
                    "round {} lost its catalog",
                    r.round
                );
            }
        }
    }
    assert!(rounds >= 2, "{rounds} rounds kept");
    // The catalog recorded at the start was carried past each cut, never recorded twice
    // between two cuts.
    let copies = events
        .iter()
        .filter(|e| matches!(e.event, DomainEvent::InstanceTypesObserved { .. }))
        .count();
    assert!(copies <= 2, "{copies} copies kept");

    // A restart rebuilds the same state from the snapshot and what follows it.
    let replayed = journal.replay::<ClusterView>(Until::End).unwrap();
    assert!(replayed.from_snapshot.is_some());
    assert_eq!(
        replayed.state.pending.len() + replayed.state.bound.len(),
        10
    );
}
