//! A history in a store (here a map of object names to bytes), taken over by journals that
//! stand differently against it: empty, behind, level, and diverged.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::{CounterEvent, Counters, ManualClock, added};
use karpenter_journal::history::{Listing, Standing, adopt, remote_history, standing};
use karpenter_journal::segment::{decode_segment, segment_name, snapshot_name};
use karpenter_journal::{Journal, Projection, Until};

type CounterJournal = Journal<CounterEvent>;
type Store = BTreeMap<String, Vec<u8>>;

fn open(dir: &tempfile::TempDir) -> CounterJournal {
    Journal::open_with_clock(dir.path(), ManualClock::at(7_000)).expect("open journal")
}

/// Ships everything after `after` in segments of three records (the snapshot at 16 falls
/// inside one).
fn ship(journal: &CounterJournal, store: &mut Store, mut after: u64) -> u64 {
    while let Some(sealed) = journal.seal_segment(after, 400).unwrap() {
        let name = segment_name(sealed.header.range);
        assert!(!store.contains_key(&name), "{name} uploaded twice");
        store.insert(name, sealed.bytes);
        after = sealed.header.range.last;
    }
    after
}

/// What a journal does with the store's history, as a leader starting up would.
fn take_over(journal: &CounterJournal, store: &Store) -> Standing {
    let remote = remote_history(&Listing::parse(store.keys())).unwrap();
    let last = journal.last_seq().unwrap().unwrap_or(0);
    let snapshot = journal.snapshot_seqs().unwrap().last().copied();
    let mut plan = standing(
        remote.as_ref(),
        journal.first_seq().unwrap(),
        last,
        snapshot,
    );
    if let (Standing::Ahead { check: Some(r), .. }, Some(remote)) = (&plan, &remote) {
        let segment = decode_segment(&store[&segment_name(*r)]).unwrap();
        if !journal.agrees_with(&segment).unwrap() {
            plan = adopt(remote);
        }
    }
    match &plan {
        Standing::Behind { chain } => {
            for r in chain {
                journal
                    .import_segment(&decode_segment(&store[&segment_name(*r)]).unwrap())
                    .unwrap();
            }
        }
        Standing::Adopt { snapshot, chain } => {
            assert_eq!(
                journal.last_seq().unwrap(),
                None,
                "set the journal aside first"
            );
            if let Some(seq) = snapshot {
                journal
                    .import_snapshot(&store[&snapshot_name(*seq)])
                    .unwrap();
            }
            for r in chain {
                journal
                    .import_segment(&decode_segment(&store[&segment_name(*r)]).unwrap())
                    .unwrap();
            }
        }
        Standing::Fresh { .. } | Standing::Ahead { .. } => {}
    }
    plan
}

fn state(journal: &CounterJournal) -> BTreeMap<String, i64> {
    journal.replay::<Counters>(Until::End).unwrap().state.0
}

fn leader_with_history(store: &mut Store) -> (tempfile::TempDir, CounterJournal) {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(&dir);
    for i in 0..30 {
        journal.append(&added(&format!("c{}", i % 4), i)).unwrap();
    }
    let at_16 = journal.replay::<Counters>(Until::Seq(16)).unwrap().state;
    journal
        .save_snapshot(16, Counters::SNAPSHOT_VERSION, &at_16)
        .unwrap();
    assert_eq!(ship(&journal, store, 0), 30);
    store.insert(
        snapshot_name(16),
        journal.snapshot_frame(16).unwrap().unwrap(),
    );
    (dir, journal)
}

#[test]
fn an_empty_journal_adopts_the_newest_snapshot_and_the_segments_after_it() {
    let mut store = Store::new();
    let (_old, old) = leader_with_history(&mut store);
    let dir = tempfile::tempdir().unwrap();
    let new = open(&dir);
    let plan = take_over(&new, &store);
    assert!(
        matches!(&plan, Standing::Adopt { snapshot: Some(16), chain } if chain.last().unwrap().last == 30),
        "{plan:?}"
    );
    assert_eq!(state(&new), state(&old));
    assert_eq!(new.append(&added("c0", 100)).unwrap(), 31);
    new.flush().unwrap();
    drop(new);
    // Reopened, it still goes on after the history it took over.
    let new = open(&dir);
    assert_eq!(new.append(&added("c0", 1)).unwrap(), 32);
    assert_eq!(state(&new)["c0"], state(&old)["c0"] + 101);

    // A journal holding only a snapshot numbers its records after it, reopened too.
    let bare_dir = tempfile::tempdir().unwrap();
    {
        let bare = open(&bare_dir);
        bare.import_snapshot(&store[&snapshot_name(16)]).unwrap();
        bare.flush().unwrap();
    }
    assert_eq!(open(&bare_dir).append(&added("c0", 1)).unwrap(), 17);
}

#[test]
fn a_journal_behind_the_store_catches_up_and_one_level_with_it_goes_on() {
    let mut store = Store::new();
    let (_old, old) = leader_with_history(&mut store);
    let dir = tempfile::tempdir().unwrap();
    let behind = open(&dir);
    let first = decode_segment(store.values().next().unwrap()).unwrap();
    behind.import_segment(&first).unwrap();
    let plan = take_over(&behind, &store);
    assert!(matches!(plan, Standing::Behind { .. }), "{plan:?}");
    assert_eq!(
        behind
            .read_raw_from(0)
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        old.read_raw_from(0).map(Result::unwrap).collect::<Vec<_>>()
    );

    // The old leader itself, with records written since its last upload.
    old.append(&added("c1", 5)).unwrap();
    let plan = take_over(&old, &store);
    assert!(
        matches!(
            plan,
            Standing::Ahead {
                after: 30,
                check: Some(_)
            }
        ),
        "{plan:?}"
    );
    assert_eq!(ship(&old, &mut store, 30), 31);
}

#[test]
fn a_journal_whose_records_differ_from_the_store_is_not_continued() {
    let mut store = Store::new();
    let (_old, _) = leader_with_history(&mut store);
    let dir = tempfile::tempdir().unwrap();
    let other = open(&dir);
    for i in 0..35 {
        other.append(&added("elsewhere", i)).unwrap();
    }
    let plan = take_over_checked(&other, &store);
    assert!(
        matches!(
            plan,
            Standing::Adopt {
                snapshot: Some(16),
                ..
            }
        ),
        "{plan:?}"
    );
}

/// Like [`take_over`] up to the decision, for a journal that would have to be set aside.
fn take_over_checked(journal: &CounterJournal, store: &Store) -> Standing {
    let remote = remote_history(&Listing::parse(store.keys()))
        .unwrap()
        .unwrap();
    let last = journal.last_seq().unwrap().unwrap_or(0);
    let plan = standing(Some(&remote), journal.first_seq().unwrap(), last, None);
    let Standing::Ahead { check: Some(r), .. } = plan else {
        panic!("{plan:?}");
    };
    let segment = decode_segment(&store[&segment_name(r)]).unwrap();
    assert!(!journal.agrees_with(&segment).unwrap());
    adopt(&remote)
}
