//! Sealed segments through the public API: a history shipped segment by segment and taken
//! over by another journal reads back as the same records, and a damaged or misplaced
//! segment is refused, never read as a shorter history.
#![allow(clippy::unwrap_used)]

mod common;

use common::{CounterEvent, Counters, ManualClock, added};
use karpenter_journal::format::{self, RawRecord};
use karpenter_journal::segment::{
    SegmentError, SegmentRange, chain_from, decode_segment, parse_segment_name, segment_name,
};
use karpenter_journal::{Journal, JournalError, RetentionPolicy, Until};

type CounterJournal = Journal<CounterEvent>;

fn open(dir: &tempfile::TempDir, at_ms: i64) -> CounterJournal {
    Journal::open_with_clock(dir.path(), ManualClock::at(at_ms)).expect("open journal")
}

fn raw(journal: &CounterJournal) -> Vec<RawRecord> {
    journal
        .read_raw_from(0)
        .collect::<Result<_, _>>()
        .expect("read")
}

/// Seals everything after `after` in segments of about `max_bytes`; returns them by name.
fn ship(journal: &CounterJournal, mut after: u64, max_bytes: usize) -> Vec<(String, Vec<u8>)> {
    let mut shipped = Vec::new();
    while let Some(sealed) = journal.seal_segment(after, max_bytes).unwrap() {
        assert_eq!(sealed.header.range.after, after);
        after = sealed.header.range.last;
        shipped.push((segment_name(sealed.header.range), sealed.bytes));
    }
    shipped
}

#[test]
fn a_history_shipped_in_segments_is_taken_over_record_for_record() {
    let old = tempfile::tempdir().unwrap();
    let journal = open(&old, 5_000);
    for i in 0..40 {
        journal.append(&added(&format!("c{}", i % 3), i)).unwrap();
    }
    // A large payload (compressed in its frame) travels as stored.
    journal
        .append(&CounterEvent::Created {
            name: "x".repeat(20_000),
        })
        .unwrap();
    let shipped = ship(&journal, 0, 600);
    assert!(shipped.len() > 3, "{} segments", shipped.len());
    let listed: Vec<SegmentRange> = shipped
        .iter()
        .map(|(name, _)| parse_segment_name(name).unwrap())
        .collect();
    let chain = chain_from(0, &listed).unwrap();
    assert_eq!(chain.last().unwrap().last, 41);

    // A new process on an empty disk, its clock elsewhere: the records keep their times.
    let new = tempfile::tempdir().unwrap();
    let taker = open(&new, 9_000_000);
    for (_, bytes) in &shipped {
        let segment = decode_segment(bytes).unwrap();
        let imported = taker.import_segment(&segment).unwrap();
        assert_eq!(imported.skipped, 0);
        assert_eq!(imported.records, segment.records.len() as u64);
    }
    assert_eq!(raw(&taker), raw(&journal));
    assert_eq!(taker.by_entity("Counter", "c1").count(), 13);
    let replayed = taker.replay::<Counters>(Until::End).unwrap();
    assert_eq!(
        replayed.state.0,
        journal.replay::<Counters>(Until::End).unwrap().state.0
    );
    // The taker continues the same numbering, and its records survive reopening.
    assert_eq!(taker.append(&added("c0", 1)).unwrap(), 42);
    taker.flush().unwrap();
    drop(taker);
    let reopened = open(&new, 9_000_000);
    assert_eq!(reopened.verify().unwrap(), 42);
    assert_eq!(reopened.last_seq().unwrap(), Some(42));
}

#[test]
fn a_segment_holding_records_the_journal_has_adds_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(&dir, 1_000);
    for i in 0..6 {
        journal.append(&added("a", i)).unwrap();
    }
    let whole =
        decode_segment(&journal.seal_segment(0, usize::MAX).unwrap().unwrap().bytes).unwrap();
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = open(&copy_dir, 1_000);
    let first = decode_segment(&journal.seal_segment(0, 1).unwrap().unwrap().bytes).unwrap();
    assert_eq!(
        first.records.len(),
        1,
        "at least one record, then what fits"
    );
    copy.import_segment(&first).unwrap();
    let imported = copy.import_segment(&whole).unwrap();
    assert_eq!((imported.records, imported.skipped), (5, 1));
    assert_eq!(raw(&copy), raw(&journal));

    // A journal that wrote its own record 1 does not take another history's.
    let other_dir = tempfile::tempdir().unwrap();
    let other = open(&other_dir, 1_000);
    other.append(&added("b", 1)).unwrap();
    let err = other.import_segment(&whole).unwrap_err();
    assert!(err.to_string().contains("diverge"), "{err}");
    assert_eq!(other.last_seq().unwrap(), Some(1), "nothing written");

    // A segment starting after the journal's end would leave a gap.
    let later =
        decode_segment(&journal.seal_segment(3, usize::MAX).unwrap().unwrap().bytes).unwrap();
    let empty_dir = tempfile::tempdir().unwrap();
    let empty = open(&empty_dir, 1_000);
    let err = empty.import_segment(&later).unwrap_err();
    assert!(matches!(err, JournalError::Import { .. }), "{err}");
    assert!(err.to_string().contains("(3, 6]"), "{err}");
    assert_eq!(empty.last_seq().unwrap(), None);
}

#[test]
fn every_torn_or_flipped_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(&dir, 1_000);
    journal.append(&added("a", 1)).unwrap();
    journal.append(&added("b", 2)).unwrap();
    let bytes = journal.seal_segment(0, usize::MAX).unwrap().unwrap().bytes;
    assert_eq!(decode_segment(&bytes).unwrap().records.len(), 2);
    for cut in 0..bytes.len() {
        assert!(decode_segment(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut damaged = bytes.clone();
            damaged[i] ^= 1 << bit;
            assert!(decode_segment(&damaged).is_err(), "flip at {i}:{bit}");
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(decode_segment(&longer).is_err());
}

#[test]
fn a_segment_whose_header_lies_is_refused_even_with_a_good_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(&dir, 1_000);
    for i in 0..3 {
        journal.append(&added("a", i)).unwrap();
    }
    let bytes = journal.seal_segment(0, usize::MAX).unwrap().unwrap().bytes;
    // Claim the range (0, 5]: the records end at 3.
    let mut lying = bytes[..bytes.len() - 4].to_vec();
    lying[12..20].copy_from_slice(&5u64.to_be_bytes());
    let crc = crc32(&lying);
    lying.extend_from_slice(&crc.to_be_bytes());
    let err = decode_segment(&lying).unwrap_err();
    assert!(matches!(err, SegmentError::Inconsistent { .. }), "{err}");
}

fn crc32(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bit by bit: the test does not lean on the crate the journal uses.
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn sealing_refuses_records_retention_removed_and_carries_a_quarantine_gap() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(&dir, 1_000);
    for i in 0..10 {
        journal.append(&added("a", i)).unwrap();
    }
    let state = journal.replay::<Counters>(Until::Seq(6)).unwrap().state;
    journal.save_snapshot(6, 1, &state).unwrap();
    let report = journal
        .apply_retention(RetentionPolicy {
            max_bytes: Some(1),
            max_age: None,
        })
        .unwrap();
    assert!(report.first_seq > 1, "{report:?}");
    let err = journal.seal_segment(0, usize::MAX).unwrap_err();
    assert!(matches!(err, JournalError::Truncated { .. }), "{err}");
    assert!(
        journal
            .seal_segment(report.first_seq - 1, usize::MAX)
            .unwrap()
            .is_some()
    );

    // A damaged tail's number is skipped by the journal; the segment still covers it.
    let gap = tempfile::tempdir().unwrap();
    {
        let journal = open(&gap, 1_000);
        for i in 0..4 {
            journal.append(&added("a", i)).unwrap();
        }
        journal.flush().unwrap();
    }
    {
        let db = karpenter_journal::open_db(gap.path()).unwrap();
        let full = db.get(format::event_key(4)).unwrap().unwrap();
        db.insert(format::event_key(4), &full[..10]).unwrap();
        db.flush().unwrap();
    }
    let journal = open(&gap, 1_000);
    assert_eq!(journal.recovery().quarantined, vec![4]);
    assert_eq!(journal.append(&added("a", 9)).unwrap(), 5);
    let segment =
        decode_segment(&journal.seal_segment(0, usize::MAX).unwrap().unwrap().bytes).unwrap();
    assert_eq!(segment.header.range, SegmentRange { after: 0, last: 5 });
    let seqs: Vec<u64> = segment.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 5]);
}
