//! Sealed segments: runs of journal records packed into one immutable object, the unit the
//! journal is shipped to object storage in and read back from when another process takes
//! the history over.
//!
//! A segment covers the half-open range `(after, last]` of sequence numbers: every record
//! the journal held in that range, in order. The records inside may skip numbers (a damaged
//! tail's quarantined records keep theirs: the journal never reuses one), so continuity is
//! a property of the ranges, not of the records: a history is a chain of segments, each
//! starting where the one before it ended. An object's name says its range
//! ([`segment_name`]), so a listing alone shows a gap or an overlap before anything is
//! fetched ([`chain_from`]).
//!
//! Layout, integers big-endian:
//!
//! ```text
//! "KG" | version u8 = 1 | flags u8 = 0 | after u64 | last u64 | count u32
//! | first_recorded_at_ms i64 | last_recorded_at_ms i64
//! | count × (frame_len u32 | event frame, as the journal stores it)
//! | crc32 (IEEE) of every byte before it
//! ```
//!
//! The frames are the journal's own (each with its checksum), copied as stored, so a
//! segment holds the bytes the journal wrote, and reading one checks every frame, the
//! count, the range and the whole object's checksum: a torn or partly written object is an
//! error, never a shorter history.

use std::fmt;

use crate::format::{
    FrameError, RawRecord, Reader, decode_event, decode_event_header, decode_snapshot,
    encode_event, event_key, index_key, seq_of_key, snapshot_key,
};
use crate::{EntityRef, Journal, JournalError, JournalEvent, Result, check_entity};

/// Magic bytes opening every segment.
pub const SEGMENT_MAGIC: [u8; 2] = *b"KG";
/// The segment layout version this build writes and reads.
pub const SEGMENT_VERSION: u8 = 1;
/// Bytes before the first frame.
const HEADER_LEN: usize = 2 + 1 + 1 + 8 + 8 + 4 + 8 + 8;

/// The sequence numbers a segment covers: `(after, last]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentRange {
    /// The last sequence number of the history before this segment (0 at the start).
    pub after: u64,
    /// The last sequence number the segment covers.
    pub last: u64,
}

impl fmt::Display for SegmentRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}]", self.after, self.last)
    }
}

/// A segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// What it covers.
    pub range: SegmentRange,
    /// How many records it holds.
    pub count: u32,
    /// When its first record was recorded (journal clock, ms since the Unix epoch).
    pub first_recorded_at_ms: i64,
    /// When its last record was recorded.
    pub last_recorded_at_ms: i64,
}

/// A decoded segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its header.
    pub header: SegmentHeader,
    /// Its records, in sequence order, each within the header's range.
    pub records: Vec<RawRecord>,
}

/// A segment made from the local journal, ready to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Its header.
    pub header: SegmentHeader,
    /// The encoded segment.
    pub bytes: Vec<u8>,
}

/// Why bytes are not a good segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The bytes end early, do not open with the magic, or fail the whole-object checksum.
    #[error("segment frame: {0}")]
    Frame(FrameError),
    /// A record inside is damaged.
    #[error("record {seq} inside the segment: {reason}")]
    Record {
        /// Its sequence number as the segment lists it (its position when unreadable).
        seq: u64,
        /// What is wrong with it.
        reason: FrameError,
    },
    /// The header does not describe what the segment holds.
    #[error("segment {range} is inconsistent: {reason}")]
    Inconsistent {
        /// The range it claims.
        range: SegmentRange,
        /// What does not add up.
        reason: String,
    },
}

/// Why the listed segments do not make one history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// Nothing listed continues the history from `from`, but later segments exist.
    #[error(
        "the history has a gap: nothing covers the records after seq {from}, yet a segment {next} was stored; the records in between were never uploaded or were deleted"
    )]
    Gap {
        /// Where the history stops.
        from: u64,
        /// The next segment listed.
        next: SegmentRange,
    },
    /// Two segments cover some of the same records: two writers uploaded one history.
    #[error(
        "segments {first} and {second} overlap: two writers uploaded the same history (a second leader?); remove the one the journal in use did not write"
    )]
    Overlap {
        /// One of them.
        first: SegmentRange,
        /// The other.
        second: SegmentRange,
    },
}

/// The part of the name every segment's starts with.
pub const SEGMENTS: &str = "segments/";

/// The object name of a segment, relative to a history's prefix; zero-padded so that names
/// sort as ranges do.
pub fn segment_name(range: SegmentRange) -> String {
    format!("{SEGMENTS}{:020}-{:020}.kjseg", range.after, range.last)
}

/// A name the names of the segments starting at `after` or later sort after, and those
/// of the segments starting before it sort before (for listing from a position).
pub fn segments_from(after: u64) -> String {
    format!("{SEGMENTS}{after:020}")
}

/// The range named by [`segment_name`], or `None` for any other name.
pub fn parse_segment_name(name: &str) -> Option<SegmentRange> {
    let (after, last) = name
        .strip_prefix(SEGMENTS)?
        .strip_suffix(".kjseg")?
        .split_once('-')?;
    let range = SegmentRange {
        after: padded_seq(after)?,
        last: padded_seq(last)?,
    };
    (range.after < range.last).then_some(range)
}

/// The object name of a snapshot taken at `seq`, relative to a history's prefix.
pub fn snapshot_name(seq: u64) -> String {
    format!("snapshots/{seq:020}.kjsnap")
}

/// The sequence number named by [`snapshot_name`], or `None` for any other name.
pub fn parse_snapshot_name(name: &str) -> Option<u64> {
    padded_seq(name.strip_prefix("snapshots/")?.strip_suffix(".kjsnap")?)
}

/// A sequence number written as 20 digits.
fn padded_seq(digits: &str) -> Option<u64> {
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The segments that carry a history on from seq `from` (0 for the beginning, or the seq a
/// restored snapshot includes), in order: the one holding the record after `from`, then each
/// one starting where the one before ended. Segments wholly at or before `from` are not
/// needed and left out. A history that stops while later segments exist, or two segments
/// covering the same records, is an error: continuing it would lose or repeat records.
pub fn chain_from(from: u64, listed: &[SegmentRange]) -> Result<Vec<SegmentRange>, ChainError> {
    let mut needed: Vec<SegmentRange> = listed.iter().copied().filter(|r| r.last > from).collect();
    needed.sort();
    needed.dedup();
    for pair in needed.windows(2) {
        if pair[1].after < pair[0].last {
            return Err(ChainError::Overlap {
                first: pair[0],
                second: pair[1],
            });
        }
    }
    let mut at = from;
    for range in &needed {
        if range.after > at {
            return Err(ChainError::Gap {
                from: at,
                next: *range,
            });
        }
        at = range.last;
    }
    Ok(needed)
}

/// Encodes `frames` (each a stored event frame, in order, all within `range`) as a segment.
fn encode(header: &SegmentHeader, frames: &[&[u8]]) -> Vec<u8> {
    let body: usize = frames.iter().map(|f| 4 + f.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + body + 4);
    out.extend_from_slice(&SEGMENT_MAGIC);
    out.push(SEGMENT_VERSION);
    out.push(0);
    out.extend_from_slice(&header.range.after.to_be_bytes());
    out.extend_from_slice(&header.range.last.to_be_bytes());
    out.extend_from_slice(&header.count.to_be_bytes());
    out.extend_from_slice(&header.first_recorded_at_ms.to_be_bytes());
    out.extend_from_slice(&header.last_recorded_at_ms.to_be_bytes());
    for frame in frames {
        out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        out.extend_from_slice(frame);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Reads a segment's header and the frames it holds, checking the whole object's checksum
/// (not yet the frames').
fn read_frames(bytes: &[u8]) -> Result<(SegmentHeader, Vec<&[u8]>), SegmentError> {
    let mut r = Reader::new(bytes);
    if r.array::<2>().map_err(SegmentError::Frame)? != SEGMENT_MAGIC {
        return Err(SegmentError::Frame(FrameError::BadMagic));
    }
    let version = r.u8().map_err(SegmentError::Frame)?;
    let flags = r.u8().map_err(SegmentError::Frame)?;
    if version != SEGMENT_VERSION {
        return Err(SegmentError::Frame(FrameError::UnsupportedVersion(version)));
    }
    if flags != 0 {
        return Err(SegmentError::Frame(FrameError::UnsupportedFlags(flags)));
    }
    let header = (|| {
        Ok::<_, FrameError>(SegmentHeader {
            range: SegmentRange {
                after: r.u64()?,
                last: r.u64()?,
            },
            count: r.u32()?,
            first_recorded_at_ms: r.u64()? as i64,
            last_recorded_at_ms: r.u64()? as i64,
        })
    })()
    .map_err(SegmentError::Frame)?;
    // The whole-object checksum first: a torn object fails here, whatever its frames say.
    let covered = bytes
        .len()
        .checked_sub(4)
        .filter(|n| *n >= HEADER_LEN)
        .ok_or(SegmentError::Frame(FrameError::Truncated {
            len: bytes.len(),
        }))?;
    let crc = u32::from_be_bytes(bytes[covered..].try_into().unwrap_or_default());
    if crc32fast::hash(&bytes[..covered]) != crc {
        return Err(SegmentError::Frame(FrameError::ChecksumMismatch));
    }
    let mut frames = Vec::with_capacity(header.count.min(1 << 20) as usize);
    let mut body = Reader::new(&bytes[HEADER_LEN..covered]);
    while frames.len() < header.count as usize {
        let position = frames.len() as u64;
        let frame = body
            .u32()
            .and_then(|len| body.take(len as usize))
            .map_err(|reason| SegmentError::Record {
                seq: position,
                reason,
            })?;
        frames.push(frame);
    }
    if body.take(1).is_ok() {
        return Err(SegmentError::Frame(FrameError::TrailingBytes));
    }
    Ok((header, frames))
}

/// Decodes a segment, checking every frame and that its records are in order, within its
/// range, as many as its header says and recorded when its header says.
pub fn decode_segment(bytes: &[u8]) -> Result<Segment, SegmentError> {
    let (header, frames) = read_frames(bytes)?;
    let range = header.range;
    let inconsistent = |reason: String| SegmentError::Inconsistent { range, reason };
    if range.after >= range.last {
        return Err(inconsistent("its range is empty".into()));
    }
    let mut records = Vec::with_capacity(frames.len());
    let mut previous = range.after;
    for frame in frames {
        let seq = frame_seq(frame).unwrap_or(previous);
        let record =
            decode_event(seq, frame).map_err(|reason| SegmentError::Record { seq, reason })?;
        if record.seq <= previous || record.seq > range.last {
            return Err(inconsistent(format!(
                "record {} follows {previous} outside the range or out of order",
                record.seq
            )));
        }
        previous = record.seq;
        records.push(record);
    }
    let times = (
        records.first().map(|r| r.recorded_at_ms),
        records.last().map(|r| r.recorded_at_ms),
    );
    if let (Some(first), Some(last)) = times
        && (first, last) != (header.first_recorded_at_ms, header.last_recorded_at_ms)
    {
        return Err(inconsistent(format!(
            "its records were recorded {first}..{last}, its header says {}..{}",
            header.first_recorded_at_ms, header.last_recorded_at_ms
        )));
    }
    if records.last().map(|r| r.seq) != Some(range.last) {
        return Err(inconsistent(format!(
            "its last record is {}, not {}",
            previous, range.last
        )));
    }
    Ok(Segment { header, records })
}

/// The sequence number an event frame says it holds (read before checking the frame, so a
/// damaged one is reported under the number it claims).
fn frame_seq(frame: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(frame.get(4..12)?.try_into().ok()?))
}

/// What [`Journal::import_segment`] added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Records written.
    pub records: u64,
    /// Records the journal already held (at or before its last one) and left as they were.
    pub skipped: u64,
}

impl<E: JournalEvent> Journal<E> {
    /// Seals the records after seq `after` into a segment of about `max_bytes` (at least one
    /// record, then whole records while they fit), copying the stored frames as they are.
    /// `None` when no record follows `after`. A damaged record is an error, never left out.
    pub fn seal_segment(&self, after: u64, max_bytes: usize) -> Result<Option<Sealed>> {
        // Records retention removed are not in the segment's range unnoticed.
        if let Some(first) = self.first_seq()?
            && first > after.saturating_add(1)
        {
            return Err(JournalError::Truncated {
                requested: after.saturating_add(1),
                first_available: first,
            });
        }
        let mut frames = Vec::new();
        let mut size = HEADER_LEN + 4;
        let mut times = (0, 0);
        let mut last = after;
        let start = event_key(after.saturating_add(1));
        for item in self.db.range(start..=event_key(u64::MAX)) {
            let (key, value) = item?;
            let Some(seq) = seq_of_key(&key) else { break };
            if !frames.is_empty() && size + 4 + value.len() > max_bytes {
                break;
            }
            let header = decode_event_header(seq, &value)
                .map_err(|reason| JournalError::Corrupted { seq, reason })?;
            if frames.is_empty() {
                times.0 = header.recorded_at_ms;
            }
            times.1 = header.recorded_at_ms;
            size += 4 + value.len();
            last = seq;
            frames.push(value);
        }
        if frames.is_empty() {
            return Ok(None);
        }
        let header = SegmentHeader {
            range: SegmentRange { after, last },
            count: frames.len() as u32,
            first_recorded_at_ms: times.0,
            last_recorded_at_ms: times.1,
        };
        let borrowed: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        Ok(Some(Sealed {
            header,
            bytes: encode(&header, &borrowed),
        }))
    }

    /// Writes a segment's records under their own sequence numbers and times. Records the
    /// journal holds already (at or before its last one) must be the same records, byte for
    /// byte, and are left as they are; those before its oldest record (covered by a
    /// snapshot, or removed by retention) are left out; the journal must reach at least the segment's start
    /// (`after`), or the records in between would be missing. One atomic write; durable once
    /// [`Journal::flush`] returns.
    pub fn import_segment(&self, segment: &Segment) -> Result<Imported> {
        let range = segment.header.range;
        let refuse = |reason: String| JournalError::Import {
            range: range.to_string(),
            reason,
        };
        let mut next = self.lock_next_seq();
        let held = next.saturating_sub(1);
        if range.after > held {
            return Err(refuse(format!(
                "the journal ends at seq {held}, so the records after it would be missing"
            )));
        }
        // Records before the oldest one held are covered by a snapshot (a history taken
        // over from one) or were removed by retention: nothing to compare them with.
        let first_held = self.first_seq()?.unwrap_or(u64::MAX);
        let mut batch = sled::Batch::default();
        let (mut records, mut skipped, mut bytes) = (0, 0, 0);
        for record in &segment.records {
            let frame = encode_event(record);
            if record.seq < first_held && record.seq <= held {
                skipped += 1;
                continue;
            }
            if record.seq <= held {
                if self.db.get(event_key(record.seq))?.as_deref() != Some(&frame[..]) {
                    return Err(refuse(format!(
                        "the journal holds a different record {} (or none): the two histories diverge",
                        record.seq
                    )));
                }
                skipped += 1;
                continue;
            }
            check_entity(&EntityRef::new(record.kind.as_str(), record.name.as_str()))?;
            batch.insert(
                &index_key(&record.kind, &record.name, record.seq)[..],
                &[][..],
            );
            bytes += frame.len() as u64;
            batch.insert(&event_key(record.seq)[..], frame);
            records += 1;
        }
        if records > 0 {
            self.db.apply_batch(batch)?;
            self.count_bytes(|total| total + bytes);
            *next = range.last + 1;
            drop(next);
            self.notifier.publish(range.last);
        }
        Ok(Imported { records, skipped })
    }
}

impl<E: JournalEvent> Journal<E> {
    /// The snapshot at `seq` as stored (its frame, checked), for shipping; `None` if there
    /// is none.
    pub fn snapshot_frame(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        let Some(frame) = self.db.get(snapshot_key(seq))? else {
            return Ok(None);
        };
        decode_snapshot(seq, &frame).map_err(|reason| JournalError::Corrupted { seq, reason })?;
        Ok(Some(frame.to_vec()))
    }

    /// Stores a snapshot frame another journal shipped, checked; returns its seq. A journal
    /// holding nothing after it numbers its next record after it, so a history taken over
    /// from a snapshot goes on where it left off.
    pub fn import_snapshot(&self, frame: &[u8]) -> Result<u64> {
        let seq = frame_seq(frame).unwrap_or(0);
        decode_snapshot(seq, frame).map_err(|reason| JournalError::Corrupted { seq, reason })?;
        let mut next = self.lock_next_seq();
        self.db.insert(snapshot_key(seq), frame)?;
        if *next <= seq {
            *next = seq + 1;
        }
        Ok(seq)
    }

    /// Whether every record this journal holds in the segment's range is the segment's
    /// record, byte for byte, and it holds no record there the segment lacks (records it no
    /// longer holds, removed by retention, are not compared). `false` means the two
    /// histories diverged at that range.
    pub fn agrees_with(&self, segment: &Segment) -> Result<bool> {
        let range = segment.header.range;
        let mut theirs = segment.records.iter();
        let first_held = self.first_seq()?.unwrap_or(u64::MAX);
        let mut next_theirs = theirs.next();
        while next_theirs.is_some_and(|r| r.seq < first_held) {
            next_theirs = theirs.next();
        }
        let start = event_key(range.after.saturating_add(1).max(first_held));
        for item in self.db.range(start..=event_key(range.last)) {
            let (key, ours) = item?;
            let Some(record) = next_theirs else {
                return Ok(false);
            };
            if seq_of_key(&key) != Some(record.seq) || ours[..] != encode_event(record)[..] {
                return Ok(false);
            }
            next_theirs = theirs.next();
        }
        Ok(next_theirs.is_none() || self.last_seq()?.is_none_or(|last| last < range.last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(after: u64, last: u64) -> SegmentRange {
        SegmentRange { after, last }
    }

    #[test]
    fn names_round_trip_and_sort_as_ranges() {
        let names: Vec<String> = [range(0, 9), range(9, 120), range(120, 1_000_000)]
            .into_iter()
            .map(segment_name)
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        assert_eq!(parse_segment_name(&names[1]), Some(range(9, 120)));
        assert_eq!(parse_snapshot_name(&snapshot_name(42)), Some(42));
        let from = segments_from(9);
        assert!(segment_name(range(0, 9)) < from && segment_name(range(8, 12)) < from);
        assert!(segment_name(range(9, 10)) > from && segment_name(range(10, 11)) > from);
        for bad in [
            "segments/9-120.kjseg",
            "segments/00000000000000000120-00000000000000000009.kjseg",
            "segments/00000000000000000009-00000000000000000120.kjsnap",
            "snapshots/0000000000000000004x.kjsnap",
            "other/00000000000000000009-00000000000000000120.kjseg",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
            assert_eq!(parse_snapshot_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_chain_follows_ranges_and_refuses_gaps_and_overlaps() {
        let listed = [range(20, 35), range(0, 10), range(10, 20), range(35, 36)];
        assert_eq!(
            chain_from(0, &listed),
            Ok(vec![
                range(0, 10),
                range(10, 20),
                range(20, 35),
                range(35, 36)
            ])
        );
        // From a snapshot at 15: the segment holding 16 onwards.
        assert_eq!(
            chain_from(15, &listed),
            Ok(vec![range(10, 20), range(20, 35), range(35, 36)])
        );
        assert_eq!(chain_from(36, &listed), Ok(vec![]));
        assert_eq!(
            chain_from(0, &[range(0, 10), range(12, 20)]),
            Err(ChainError::Gap {
                from: 10,
                next: range(12, 20)
            })
        );
        assert_eq!(
            chain_from(5, &[range(8, 10)]),
            Err(ChainError::Gap {
                from: 5,
                next: range(8, 10)
            })
        );
        assert_eq!(
            chain_from(0, &[range(0, 10), range(10, 20), range(10, 15)]),
            Err(ChainError::Overlap {
                first: range(10, 15),
                second: range(10, 20)
            })
        );
        assert_eq!(
            chain_from(0, &[range(0, 10), range(0, 10)]),
            Ok(vec![range(0, 10)]),
            "the same object listed twice"
        );
    }
}
