//! The journal's files torn and damaged on disk, as a crash in the middle of a write or a bad
//! disk leaves them: opening gives the records up to the last good one, or an error; never a
//! panic, never a record missing in the middle, never a flushed record silently gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{CounterEvent, ManualClock, added};
use karpenter_journal::Journal;

type CounterJournal = Journal<CounterEvent>;

const EVENTS: u64 = 40;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// What opening a damaged copy gave.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Opened, with every record from 1 to this one readable and verified.
    Prefix(u64),
    /// Refused with an error.
    Refused,
}

/// Opens `dir` and checks what it holds: a gap-free prefix of what was written, or an error.
/// A panic fails the calling test (it is not caught).
fn outcome(dir: &Path) -> Outcome {
    let Ok(journal) = CounterJournal::open_with_clock(dir, ManualClock::at(2_000)) else {
        return Outcome::Refused;
    };
    let Ok(last) = journal.last_seq() else {
        return Outcome::Refused;
    };
    let last = last.unwrap_or(0);
    match journal.verify() {
        Ok(n) => assert_eq!(n, last, "verify counts every record up to the last"),
        Err(_) => return Outcome::Refused,
    }
    let seqs: Vec<u64> = journal.read_from(1).map(|e| e.unwrap().seq).collect();
    assert_eq!(
        seqs,
        (1..=last).collect::<Vec<_>>(),
        "no record missing in the middle"
    );
    Outcome::Prefix(last)
}

/// A journal of `EVENTS` records, flushed; returns the `db` file's bytes before and after the
/// last record's write.
fn written(base: &Path) -> (Vec<u8>, Vec<u8>) {
    let journal = CounterJournal::open_with_clock(base, ManualClock::at(1_000)).unwrap();
    for i in 1..EVENTS {
        journal.append(&added("a", i as i64)).unwrap();
    }
    journal.flush().unwrap();
    let before = std::fs::read(base.join("db")).unwrap();
    journal.append(&added("a", EVENTS as i64)).unwrap();
    journal.flush().unwrap();
    (before, std::fs::read(base.join("db")).unwrap())
}

/// Opens a copy of `base` whose `db` file holds `bytes`. With `torn`, the copy's high-water
/// mark is the one from before the last write: a write torn by a crash is one whose flush
/// never returned, so the mark after it was never written.
fn outcome_of(base: &Path, bytes: &[u8], torn: bool) -> Outcome {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(base, copy.path());
    std::fs::write(copy.path().join("db"), bytes).unwrap();
    if torn {
        let mark = copy.path().join(karpenter_journal::FLUSHED_FILE);
        assert_eq!(
            std::fs::read_to_string(&mark).unwrap(),
            format!("{EVENTS}\n")
        );
        std::fs::write(mark, format!("{}\n", EVENTS - 1)).unwrap();
    }
    outcome(copy.path())
}

#[test]
fn a_write_torn_anywhere_in_the_last_record_opens_to_a_prefix_or_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let (before, after) = written(base.path());
    // The bytes the last write changed (sled's files are preallocated segments).
    let changed: Vec<usize> = (0..after.len())
        .filter(|&i| before.get(i) != Some(&after[i]))
        .collect();
    assert!(!changed.is_empty(), "the last write changed the db file");

    let mut outcomes = std::collections::BTreeMap::<Outcome, usize>::new();
    for (n, &torn_at) in changed.iter().enumerate() {
        // The write reached the disk up to `torn_at`: later changed bytes keep their old value.
        let mut torn = after.clone();
        for &i in &changed[n..] {
            torn[i] = before.get(i).copied().unwrap_or(0);
        }
        let got = outcome_of(base.path(), &torn, true);
        assert!(
            matches!(got, Outcome::Prefix(last) if last >= EVENTS - 1) || got == Outcome::Refused,
            "torn at byte {torn_at}: {got:?}"
        );
        *outcomes.entry(got).or_default() += 1;
    }
    eprintln!("torn writes at {} offsets: {outcomes:?}", changed.len());
}

#[test]
fn a_file_cut_anywhere_in_the_last_record_opens_to_a_prefix_or_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let (before, after) = written(base.path());
    let first = (0..after.len())
        .find(|&i| before.get(i) != Some(&after[i]))
        .unwrap();
    let end = (0..after.len())
        .rfind(|&i| before.get(i) != Some(&after[i]))
        .unwrap()
        + 1;
    let mut outcomes = std::collections::BTreeMap::<Outcome, usize>::new();
    for cut in first..=end {
        let got = outcome_of(base.path(), &after[..cut], true);
        assert!(
            matches!(got, Outcome::Prefix(last) if last >= EVENTS - 1) || got == Outcome::Refused,
            "cut at byte {cut}: {got:?}"
        );
        *outcomes.entry(got).or_default() += 1;
    }
    eprintln!("db cut at {} offsets: {outcomes:?}", end - first + 1);
}

#[test]
fn a_bit_flipped_in_an_earlier_record_is_refused_not_skipped() {
    let base = tempfile::tempdir().unwrap();
    let (before, after) = written(base.path());
    // Every fourth byte the earlier records were written to (sled's segment header at 0
    // included).
    let written: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != 0)
        .step_by(4)
        .collect();
    let mut outcomes = std::collections::BTreeMap::<Outcome, usize>::new();
    for (n, &at) in written.iter().enumerate() {
        let mut flipped = after.clone();
        flipped[at] ^= 1 << (n % 8);
        let got = outcome_of(base.path(), &flipped, false);
        // Opened with every flushed record, or refused: none silently gone.
        assert!(
            matches!(got, Outcome::Prefix(EVENTS)) || got == Outcome::Refused,
            "bit {} flipped at byte {at}: {got:?}",
            n % 8
        );
        *outcomes.entry(got).or_default() += 1;
    }
    eprintln!("a bit flipped at {} offsets: {outcomes:?}", written.len());
}
