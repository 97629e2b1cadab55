//! The on-disk format, version 1. Only this module knows how records are laid out.
//!
//! Everything lives in one sled tree so that a record and its index entry are written by
//! one atomic `sled::Batch`. Keys start with a one-byte prefix:
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `e` | seq (u64 BE) | event frame |
//! | `i` | kind, 0x00, name, 0x00, seq (u64 BE) | empty (per-entity index) |
//! | `s` | seq (u64 BE) | snapshot frame |
//! | `q` | seq (u64 BE) | raw bytes of a damaged tail record, kept for post-mortems |
//!
//! Event frame, all integers big-endian:
//!
//! ```text
//! "KJ" | frame version u8 | flags u8 | seq u64 | recorded_at_ms i64 | schema_version u16
//! | kind_len u8 | kind | name_len u16 | name | type_len u8 | event_type | payload_len u32 | payload
//! | crc32 (IEEE) of every byte before it
//! ```
//!
//! Snapshot frame: `"KS" | version u8 | flags u8 | seq u64 | recorded_at_ms i64 |
//! schema_version u16 | payload_len u32 | payload | crc32`.
//!
//! Version 1 frames hold the payload as it is (their flags byte is 0). A payload of
//! [`COMPRESS_FROM`] bytes or more is written in a version 2 frame with flag [`FLAG_LZ4`]:
//! the stored payload is `raw_len u32 | LZ4 block`, and the checksum covers the stored bytes.
//! An instance-type set (about 2 MB of JSON) shrinks about tenfold, and so does every copy
//! sled makes of it. A build that predates version 2 reports such a frame as unsupported
//! instead of misreading it; this build reads both.

use std::fmt;

/// Magic bytes opening every event frame.
pub const EVENT_MAGIC: [u8; 2] = *b"KJ";
/// Magic bytes opening every snapshot frame.
pub const SNAPSHOT_MAGIC: [u8; 2] = *b"KS";
/// The frame layout version of a frame whose payload is stored as it is.
pub const FRAME_VERSION: u8 = 1;
/// The frame layout version of a frame with flags (a compressed payload).
pub const FLAGGED_FRAME_VERSION: u8 = 2;
/// Flag: the payload is `raw_len u32 | LZ4 block`.
pub const FLAG_LZ4: u8 = 0x01;
/// Payloads from this size on are compressed. Smaller ones gain little and are the
/// common case, so they pay nothing.
pub const COMPRESS_FROM: usize = 16 * 1024;
/// An LZ4 block expands at most 255-fold (a match length byte of 255 per input byte),
/// so a claimed size beyond that is a damaged frame, not a reason to allocate.
const LZ4_MAX_RATIO: usize = 255;

pub(crate) const EVENT_PREFIX: u8 = b'e';
pub(crate) const INDEX_PREFIX: u8 = b'i';
pub(crate) const SNAPSHOT_PREFIX: u8 = b's';
pub(crate) const QUARANTINE_PREFIX: u8 = b'q';

/// Longest entity kind accepted (it is stored with a one-byte length).
pub const MAX_KIND_LEN: usize = u8::MAX as usize;
/// Longest entity name accepted (it is stored with a two-byte length).
pub const MAX_NAME_LEN: usize = u16::MAX as usize;
/// Longest event type accepted (it is stored with a one-byte length).
pub const MAX_EVENT_TYPE_LEN: usize = u8::MAX as usize;

/// The key of the event with sequence number `seq`.
pub fn event_key(seq: u64) -> [u8; 9] {
    prefixed_seq(EVENT_PREFIX, seq)
}

/// The key of the snapshot taken at sequence number `seq`.
pub fn snapshot_key(seq: u64) -> [u8; 9] {
    prefixed_seq(SNAPSHOT_PREFIX, seq)
}

pub(crate) fn quarantine_key(seq: u64) -> [u8; 9] {
    prefixed_seq(QUARANTINE_PREFIX, seq)
}

fn prefixed_seq(prefix: u8, seq: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = prefix;
    key[1..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// Reads the sequence number from a key produced by [`event_key`] or [`snapshot_key`].
pub(crate) fn seq_of_key(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.get(1..9)?.try_into().ok()?;
    (key.len() == 9).then(|| u64::from_be_bytes(bytes))
}

pub(crate) fn index_prefix(kind: &str, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(kind.len() + name.len() + 3);
    key.push(INDEX_PREFIX);
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    key.extend_from_slice(name.as_bytes());
    key.push(0);
    key
}

pub(crate) fn index_key(kind: &str, name: &str, seq: u64) -> Vec<u8> {
    let mut key = index_prefix(kind, name);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Reads the trailing sequence number of an index key.
pub(crate) fn seq_of_index_key(key: &[u8]) -> Option<u64> {
    let start = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key[start..].try_into().ok()?))
}

/// One event record as stored, before its payload is decoded into a domain type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Sequence number, strictly increasing, assigned by the journal.
    pub seq: u64,
    /// When the event was recorded, in milliseconds since the Unix epoch (the journal's clock).
    pub recorded_at_ms: i64,
    /// Version of the payload schema for this event type.
    pub schema_version: u16,
    /// Kind of the entity the event is about (e.g. `NodeClaim`).
    pub kind: String,
    /// Name of the entity the event is about.
    pub name: String,
    /// Stable name of the event type (e.g. `NodeClaimLaunched`).
    pub event_type: String,
    /// The serialized payload (JSON).
    pub payload: Vec<u8>,
}

/// Why a stored frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The frame ends before a field it announces.
    Truncated {
        /// Bytes present.
        len: usize,
    },
    /// The frame does not start with the expected magic bytes.
    BadMagic,
    /// The frame was written by a layout version this build cannot read.
    UnsupportedVersion(u8),
    /// The checksum does not match the bytes.
    ChecksumMismatch,
    /// Bytes follow the checksum.
    TrailingBytes,
    /// The flags byte holds a bit this build does not know.
    UnsupportedFlags(u8),
    /// A compressed payload does not decompress to the size it announces.
    BadCompression,
    /// The sequence number inside the frame differs from the one in its key.
    SeqMismatch {
        /// Sequence number in the key.
        key: u64,
        /// Sequence number in the frame.
        frame: u64,
    },
    /// A text field is not UTF-8.
    NotUtf8,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated { len } => write!(f, "frame truncated after {len} bytes"),
            FrameError::BadMagic => f.write_str("frame does not start with the journal magic"),
            FrameError::UnsupportedVersion(v) => write!(f, "unsupported frame version {v}"),
            FrameError::ChecksumMismatch => f.write_str("checksum mismatch"),
            FrameError::TrailingBytes => f.write_str("bytes after the checksum"),
            FrameError::UnsupportedFlags(flags) => {
                write!(f, "unsupported frame flags {flags:#04x}")
            }
            FrameError::BadCompression => {
                f.write_str("compressed payload does not decompress to its announced size")
            }
            FrameError::SeqMismatch { key, frame } => {
                write!(f, "frame holds seq {frame} but is stored under seq {key}")
            }
            FrameError::NotUtf8 => f.write_str("text field is not UTF-8"),
        }
    }
}

/// The payload as stored and the frame's version and flags: compressed from
/// [`COMPRESS_FROM`] bytes on, unless that would not make it smaller.
fn stored_payload(payload: &[u8]) -> (u8, u8, std::borrow::Cow<'_, [u8]>) {
    if payload.len() >= COMPRESS_FROM
        && let Ok(raw_len) = u32::try_from(payload.len())
    {
        let block = lz4_flex::block::compress(payload);
        if block.len() + 4 < payload.len() {
            let mut stored = Vec::with_capacity(block.len() + 4);
            stored.extend_from_slice(&raw_len.to_be_bytes());
            stored.extend_from_slice(&block);
            return (FLAGGED_FRAME_VERSION, FLAG_LZ4, stored.into());
        }
    }
    (FRAME_VERSION, 0, payload.into())
}

/// The payload from its stored form.
fn loaded_payload(flags: u8, stored: &[u8]) -> Result<Vec<u8>, FrameError> {
    if flags & FLAG_LZ4 == 0 {
        return Ok(stored.to_vec());
    }
    let (len, block) = stored
        .split_first_chunk::<4>()
        .ok_or(FrameError::BadCompression)?;
    let raw_len = u32::from_be_bytes(*len) as usize;
    if raw_len > block.len().saturating_mul(LZ4_MAX_RATIO) {
        return Err(FrameError::BadCompression);
    }
    let mut payload = vec![0; raw_len];
    match lz4_flex::block::decompress_into(block, &mut payload) {
        Ok(n) if n == raw_len => Ok(payload),
        _ => Err(FrameError::BadCompression),
    }
}

/// Encodes an event frame. Lengths must already be within the `MAX_*` limits.
pub fn encode_event(record: &RawRecord) -> Vec<u8> {
    let (version, flags, payload) = stored_payload(&record.payload);
    let mut out = Vec::with_capacity(
        35 + record.kind.len() + record.name.len() + record.event_type.len() + payload.len(),
    );
    out.extend_from_slice(&EVENT_MAGIC);
    out.push(version);
    out.push(flags);
    out.extend_from_slice(&record.seq.to_be_bytes());
    out.extend_from_slice(&record.recorded_at_ms.to_be_bytes());
    out.extend_from_slice(&record.schema_version.to_be_bytes());
    out.push(record.kind.len() as u8);
    out.extend_from_slice(record.kind.as_bytes());
    out.extend_from_slice(&(record.name.len() as u16).to_be_bytes());
    out.extend_from_slice(record.name.as_bytes());
    out.push(record.event_type.len() as u8);
    out.extend_from_slice(record.event_type.as_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A cursor over a frame that fails with `Truncated` instead of panicking.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(FrameError::Truncated {
            len: self.bytes.len(),
        })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn text(&mut self, n: usize) -> Result<String, FrameError> {
        std::str::from_utf8(self.take(n)?)
            .map(str::to_owned)
            .map_err(|_| FrameError::NotUtf8)
    }
    /// Checks the trailing checksum over everything read so far and that nothing follows it.
    pub(crate) fn finish(&mut self) -> Result<(), FrameError> {
        let covered = self.pos;
        let crc = self.u32()?;
        if crc32fast::hash(&self.bytes[..covered]) != crc {
            return Err(FrameError::ChecksumMismatch);
        }
        if self.pos != self.bytes.len() {
            return Err(FrameError::TrailingBytes);
        }
        Ok(())
    }
}

/// Reads magic, version and flags; returns the flags that apply.
fn read_header(r: &mut Reader<'_>, magic: [u8; 2]) -> Result<u8, FrameError> {
    if r.bytes.len() >= 2 && r.bytes[..2] != magic {
        return Err(FrameError::BadMagic);
    }
    if r.array::<2>()? != magic {
        return Err(FrameError::BadMagic);
    }
    let version = r.u8()?;
    let flags = r.u8()?;
    match version {
        // Version 1 defined the byte as 0 and never read it.
        FRAME_VERSION => Ok(0),
        FLAGGED_FRAME_VERSION if flags & !FLAG_LZ4 == 0 => Ok(flags),
        FLAGGED_FRAME_VERSION => Err(FrameError::UnsupportedFlags(flags)),
        _ => Err(FrameError::UnsupportedVersion(version)),
    }
}

/// An event frame's fields other than its payload, read without copying or decompressing
/// the payload (for passes that look at many records, such as retention).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHeader {
    /// Sequence number.
    pub seq: u64,
    /// When the event was recorded (journal clock, ms since the Unix epoch).
    pub recorded_at_ms: i64,
    /// Kind of the entity the event is about.
    pub kind: String,
    /// Name of the entity the event is about.
    pub name: String,
}

/// Reads and checks a whole event frame; the payload is returned as stored.
fn read_event(key_seq: u64, bytes: &[u8]) -> Result<(RawRecord, u8, &[u8]), FrameError> {
    let mut r = Reader { bytes, pos: 0 };
    let flags = read_header(&mut r, EVENT_MAGIC)?;
    let seq = r.u64()?;
    let recorded_at_ms = r.u64()? as i64;
    let schema_version = r.u16()?;
    let kind_len = r.u8()? as usize;
    let kind = r.text(kind_len)?;
    let name_len = r.u16()? as usize;
    let name = r.text(name_len)?;
    let type_len = r.u8()? as usize;
    let event_type = r.text(type_len)?;
    let payload_len = r.u32()? as usize;
    let stored = r.take(payload_len)?;
    r.finish()?;
    if seq != key_seq {
        return Err(FrameError::SeqMismatch {
            key: key_seq,
            frame: seq,
        });
    }
    let record = RawRecord {
        seq,
        recorded_at_ms,
        schema_version,
        kind,
        name,
        event_type,
        payload: Vec::new(),
    };
    Ok((record, flags, stored))
}

/// Decodes an event frame stored under `key_seq`.
pub fn decode_event(key_seq: u64, bytes: &[u8]) -> Result<RawRecord, FrameError> {
    let (mut record, flags, stored) = read_event(key_seq, bytes)?;
    record.payload = loaded_payload(flags, stored)?;
    Ok(record)
}

/// Checks an event frame stored under `key_seq` like [`decode_event`] (checksum and
/// layout, not the compressed payload's inside) and returns its header.
pub fn decode_event_header(key_seq: u64, bytes: &[u8]) -> Result<EventHeader, FrameError> {
    let (record, _, _) = read_event(key_seq, bytes)?;
    Ok(EventHeader {
        seq: record.seq,
        recorded_at_ms: record.recorded_at_ms,
        kind: record.kind,
        name: record.name,
    })
}

/// A snapshot as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSnapshot {
    /// The state includes every event up to and including this sequence number.
    pub seq: u64,
    /// When the snapshot was taken (journal clock, ms since the Unix epoch).
    pub recorded_at_ms: i64,
    /// Version of the state schema.
    pub schema_version: u16,
    /// The serialized state (JSON).
    pub payload: Vec<u8>,
}

/// Encodes a snapshot frame.
pub fn encode_snapshot(snapshot: &RawSnapshot) -> Vec<u8> {
    let (version, flags, payload) = stored_payload(&snapshot.payload);
    let mut out = Vec::with_capacity(28 + payload.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.push(version);
    out.push(flags);
    out.extend_from_slice(&snapshot.seq.to_be_bytes());
    out.extend_from_slice(&snapshot.recorded_at_ms.to_be_bytes());
    out.extend_from_slice(&snapshot.schema_version.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Decodes a snapshot frame stored under `key_seq`.
pub fn decode_snapshot(key_seq: u64, bytes: &[u8]) -> Result<RawSnapshot, FrameError> {
    let mut r = Reader { bytes, pos: 0 };
    let flags = read_header(&mut r, SNAPSHOT_MAGIC)?;
    let seq = r.u64()?;
    let recorded_at_ms = r.u64()? as i64;
    let schema_version = r.u16()?;
    let payload_len = r.u32()? as usize;
    let stored = r.take(payload_len)?;
    r.finish()?;
    if seq != key_seq {
        return Err(FrameError::SeqMismatch {
            key: key_seq,
            frame: seq,
        });
    }
    Ok(RawSnapshot {
        seq,
        recorded_at_ms,
        schema_version,
        payload: loaded_payload(flags, stored)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RawRecord {
        RawRecord {
            seq: 7,
            recorded_at_ms: 1_700_000_000_000,
            schema_version: 1,
            kind: "NodeClaim".into(),
            name: "default-abc12".into(),
            event_type: "NodeClaimLaunched".into(),
            payload: br#"{"instance":"i-1"}"#.to_vec(),
        }
    }

    #[test]
    fn event_frame_round_trips() {
        let record = sample();
        assert_eq!(decode_event(7, &encode_event(&record)), Ok(record));
    }

    /// Flips each bit of a frame stored under seq 7 in turn; every flip must fail to decode.
    fn assert_every_flip_detected(bytes: &[u8]) {
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.to_vec();
                damaged[i] ^= 1 << bit;
                assert!(
                    decode_event(7, &damaged).is_err(),
                    "flip at {i}:{bit} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        assert_every_flip_detected(&encode_event(&sample()));
    }

    #[test]
    fn a_frame_under_the_wrong_key_is_rejected() {
        let bytes = encode_event(&sample());
        assert_eq!(
            decode_event(8, &bytes),
            Err(FrameError::SeqMismatch { key: 8, frame: 7 })
        );
    }

    #[test]
    fn snapshot_frame_round_trips() {
        let snap = RawSnapshot {
            seq: 42,
            recorded_at_ms: 5,
            schema_version: 3,
            payload: b"{}".to_vec(),
        };
        assert_eq!(decode_snapshot(42, &encode_snapshot(&snap)), Ok(snap));
    }

    /// A payload the size of an instance-type set in shape: repetitive JSON.
    fn large() -> RawRecord {
        let item = r#"{"name":"m5.large","cpu":2,"memory_mib":8192,"offerings":[{"zone":"us-west-2a","capacity_type":"spot","price":0.0341}]},"#;
        RawRecord {
            event_type: "InstanceTypesObserved".into(),
            payload: item.repeat(400).into_bytes(),
            ..sample()
        }
    }

    /// Re-frames `stored` (the payload as stored) with a valid checksum.
    fn frame_with(version: u8, flags: u8, stored: &[u8]) -> Vec<u8> {
        let mut frame = encode_event(&sample());
        frame[2] = version;
        frame[3] = flags;
        let payload_at = frame.len() - 4 - sample().payload.len() - 4;
        frame.truncate(payload_at);
        frame.extend_from_slice(&(stored.len() as u32).to_be_bytes());
        frame.extend_from_slice(stored);
        let crc = crc32fast::hash(&frame);
        frame.extend_from_slice(&crc.to_be_bytes());
        frame
    }

    #[test]
    fn a_large_payload_is_stored_compressed_and_round_trips() {
        let record = large();
        let frame = encode_event(&record);
        assert_eq!((frame[2], frame[3]), (FLAGGED_FRAME_VERSION, FLAG_LZ4));
        assert!(
            frame.len() * 5 < record.payload.len(),
            "{} bytes stored for {}",
            frame.len(),
            record.payload.len()
        );
        assert_eq!(decode_event(7, &frame), Ok(record.clone()));
        let header = decode_event_header(7, &frame).expect("header");
        assert_eq!(
            (header.seq, header.recorded_at_ms, header.kind, header.name),
            (record.seq, record.recorded_at_ms, record.kind, record.name)
        );
        let snap = RawSnapshot {
            seq: 9,
            recorded_at_ms: 1,
            schema_version: 2,
            payload: record.payload,
        };
        let frame = encode_snapshot(&snap);
        assert_eq!(frame[3], FLAG_LZ4);
        assert_eq!(decode_snapshot(9, &frame), Ok(snap));
    }

    #[test]
    fn small_or_incompressible_payloads_stay_version_1() {
        let frame = encode_event(&sample());
        assert_eq!((frame[2], frame[3]), (FRAME_VERSION, 0));
        // Bytes from a linear congruential sequence: LZ4 finds nothing to repeat.
        let mut x: u32 = 1;
        let noise = (0..COMPRESS_FROM * 2)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect();
        let record = RawRecord {
            payload: noise,
            ..sample()
        };
        let frame = encode_event(&record);
        assert_eq!(frame[2], FRAME_VERSION);
        assert_eq!(decode_event(7, &frame), Ok(record));
    }

    #[test]
    fn every_single_bit_flip_in_a_compressed_frame_is_detected() {
        assert_every_flip_detected(&encode_event(&large()));
    }

    #[test]
    fn a_compressed_payload_that_lies_about_its_size_is_refused_without_allocating_it() {
        let block = lz4_flex::block::compress(b"hello hello hello hello");
        let with_len = |len: u32| [len.to_be_bytes().as_slice(), &block].concat();
        for (stored, why) in [
            (with_len(u32::MAX), "a 4 GiB claim"),
            (with_len(22), "one byte short"),
            (with_len(24), "one byte long"),
            (vec![0, 0], "no room for the size"),
            (
                [23u32.to_be_bytes().as_slice(), &[0xff; 8]].concat(),
                "not a block",
            ),
        ] {
            assert_eq!(
                decode_event(7, &frame_with(FLAGGED_FRAME_VERSION, FLAG_LZ4, &stored)),
                Err(FrameError::BadCompression),
                "{why}"
            );
        }
        let good = frame_with(FLAGGED_FRAME_VERSION, FLAG_LZ4, &with_len(23));
        assert_eq!(
            decode_event(7, &good).map(|r| r.payload),
            Ok(b"hello hello hello hello".to_vec())
        );
    }

    #[test]
    fn unknown_versions_and_flags_are_refused() {
        let payload = sample().payload;
        assert_eq!(
            decode_event(7, &frame_with(FLAGGED_FRAME_VERSION, 0x02, &payload)),
            Err(FrameError::UnsupportedFlags(0x02))
        );
        assert_eq!(
            decode_event(7, &frame_with(3, 0, &payload)),
            Err(FrameError::UnsupportedVersion(3))
        );
        // Version 2 without flags is a plain payload; version 1 never read its flags byte.
        assert_eq!(
            decode_event(7, &frame_with(FLAGGED_FRAME_VERSION, 0, &payload)),
            Ok(sample())
        );
        assert_eq!(
            decode_event(7, &frame_with(FRAME_VERSION, 0x80, &payload)),
            Ok(sample())
        );
    }
}
