//! A durable, generic event journal on sled: the flight recorder of karpenter-rs.
//!
//! # Layout
//! - [`Journal`]: open, [`append`](Journal::append) / [`append_batch`](Journal::append_batch)
//!   (one atomic write for many events: group commit), [`flush`](Journal::flush) for
//!   write-ahead records, [`read_from`](Journal::read_from), [`by_entity`](Journal::by_entity),
//!   [`tail`](Journal::tail), snapshots, [`apply_retention`](Journal::apply_retention) and
//!   [`replay`](Journal::replay).
//! - [`JournalEvent`]: what a domain event type implements to be stored. The journal is generic
//!   over it, so the domain events live with the domain (in `karpenter-actors`).
//! - [`Projection`]: state rebuilt by folding events; replay is that fold.
//! - [`format`]: the on-disk layout, version 1, and nothing else knows it.
//!
//! # Guarantees
//! - Sequence numbers are assigned by the journal, strictly increasing, never reused (not even
//!   after a damaged tail is quarantined).
//! - A record and its index entry are written atomically.
//! - An append is durable once [`Journal::flush`] returns (sled also flushes in the background
//!   every 500 ms). Callers that must not repeat a side effect after a crash append their
//!   intent, flush, and only then act.
//! - Opening detects a damaged tail (torn or corrupted last records), moves those records'
//!   bytes aside under the quarantine prefix and continues from the last good record; see
//!   [`Journal::recovery`]. A damaged record *before* good ones is reported as
//!   [`JournalError::Corrupted`] when read, never skipped.

mod error;
pub mod format;
pub mod history;
mod notify;
pub mod segment;

use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::{JournalError, Result};
use format::{
    EVENT_PREFIX, INDEX_PREFIX, QUARANTINE_PREFIX, SNAPSHOT_PREFIX, decode_event,
    decode_event_header, decode_snapshot, encode_event, encode_snapshot, event_key, index_key,
    index_prefix, quarantine_key, seq_of_index_key, seq_of_key, snapshot_key,
};
pub use format::{EventHeader, FrameError, RawRecord, RawSnapshot};
use notify::Notifier;

/// The entity an event is about, e.g. `NodeClaim/default-x7k2p`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct EntityRef {
    /// Kind, e.g. `NodeClaim`, `NodePool`, `Scheduler`.
    pub kind: String,
    /// Name within the kind.
    pub name: String,
}

impl EntityRef {
    /// Builds a reference from anything string-like.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        EntityRef {
            kind: kind.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for EntityRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// A domain event that can be stored in the journal.
///
/// The stored payload is kept apart from the in-memory type: `to_payload` writes the current
/// schema version, `from_payload` reads every version ever written (upcasting old ones) and may
/// return `None` for event types the domain has retired on purpose.
pub trait JournalEvent: Sized {
    /// The payload schema version `to_payload` writes.
    const SCHEMA_VERSION: u16;
    /// Stable stored name of this event's type (e.g. `NodeClaimLaunched`).
    fn event_type(&self) -> &str;
    /// The entity the event is about.
    fn entity(&self) -> EntityRef;
    /// Serializes the payload at [`Self::SCHEMA_VERSION`].
    fn to_payload(&self) -> std::result::Result<Vec<u8>, serde_json::Error>;
    /// Reads a payload written at `schema_version`. `Ok(None)` means the type is retired.
    fn from_payload(
        event_type: &str,
        schema_version: u16,
        payload: &[u8],
    ) -> std::result::Result<Option<Self>, String>;
}

/// A decoded event with its envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<E> {
    /// Sequence number.
    pub seq: u64,
    /// Journal clock at append time, ms since the Unix epoch.
    pub recorded_at_ms: i64,
    /// The entity the event is about.
    pub entity: EntityRef,
    /// Stored event type name.
    pub event_type: String,
    /// Payload schema version as stored (before upcasting).
    pub schema_version: u16,
    /// The domain event.
    pub event: E,
}

/// State rebuilt by folding events. The same `apply` runs live and on replay.
pub trait Projection<E>: Default + Serialize + DeserializeOwned {
    /// Version of the snapshot encoding of this state; snapshots of other versions are ignored.
    const SNAPSHOT_VERSION: u16;
    /// Folds one event into the state.
    fn apply(&mut self, envelope: &Envelope<E>);
}

/// Where the journal gets "now" from. The simulator passes its virtual clock so that
/// `journal replay --until TIME` speaks simulated time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The machine's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// What opening the journal had to repair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Sequence numbers of damaged tail records moved to quarantine.
    pub quarantined: Vec<u64>,
    /// The last good sequence number after recovery (0 when empty).
    pub last_good_seq: u64,
}

/// How far a replay goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Every event.
    End,
    /// Events up to and including this sequence number.
    Seq(u64),
    /// Events recorded at or before this time (ms since the Unix epoch).
    TimeMs(i64),
}

/// The result of a replay.
#[derive(Debug, Clone)]
pub struct Replayed<P> {
    /// The rebuilt state.
    pub state: P,
    /// The last event folded in (or the snapshot's seq), 0 if none.
    pub last_seq: u64,
    /// The snapshot the replay started from, if any.
    pub from_snapshot: Option<u64>,
    /// Events folded on top of the snapshot.
    pub events_applied: u64,
}

/// How much history to keep. Events newer than the latest snapshot are always kept, so the
/// current state can always be rebuilt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Remove the oldest events while the stored events exceed this many bytes.
    pub max_bytes: Option<u64>,
    /// Remove events older than this.
    pub max_age: Option<Duration>,
}

/// What a retention pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Events removed.
    pub removed_events: u64,
    /// Bytes of event frames removed.
    pub removed_bytes: u64,
    /// Snapshots removed because no event history remains behind them.
    pub removed_snapshots: u64,
    /// The oldest sequence number still stored after the pass (0 if none).
    pub first_seq: u64,
}

/// A decoded snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<S> {
    /// The state includes every event up to and including this sequence number.
    pub seq: u64,
    /// When it was taken (journal clock).
    pub recorded_at_ms: i64,
    /// The state.
    pub state: S,
}

/// The file, beside the database, that holds the last sequence number a flush made durable.
/// The storage engine stops reading at damage in its files and would open with the records
/// after it silently gone; this mark, written after each flush, makes that an error
/// ([`JournalError::Lost`]).
pub const FLUSHED_FILE: &str = "flushed";

/// The event journal. Cheap to share behind an `Arc`; appends are serialized internally.
pub struct Journal<E> {
    db: sled::Db,
    /// The journal directory.
    path: std::path::PathBuf,
    /// The last sequence number written to [`FLUSHED_FILE`].
    flushed: Mutex<u64>,
    /// Next sequence number; held while a batch is assigned numbers and written so that
    /// sequence order equals write order.
    next_seq: Mutex<u64>,
    notifier: Arc<Notifier>,
    clock: Arc<dyn Clock>,
    recovery: RecoveryReport,
    /// Bytes of stored event records, counted once when retention first asks and kept up to
    /// date after (so a retention pass does not read the whole journal to size it).
    event_bytes: Mutex<Option<u64>>,
    _event: PhantomData<fn() -> E>,
}

impl<E> std::fmt::Debug for Journal<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

/// A record about to be written, before it has a sequence number.
struct Prepared {
    schema_version: u16,
    kind: String,
    name: String,
    event_type: String,
    payload: Vec<u8>,
}

fn check_entity(entity: &EntityRef) -> Result<()> {
    let reason = if entity.kind.is_empty() || entity.name.is_empty() {
        Some("kind and name must not be empty")
    } else if entity.kind.len() > format::MAX_KIND_LEN || entity.name.len() > format::MAX_NAME_LEN {
        Some("kind must be at most 255 bytes and name at most 65535 bytes")
    } else if entity.kind.contains('\0') || entity.name.contains('\0') {
        Some("kind and name must not contain NUL")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(JournalError::InvalidEntity {
            kind: entity.kind.clone(),
            name: entity.name.clone(),
            reason,
        }),
        None => Ok(()),
    }
}

impl<E: JournalEvent> Journal<E> {
    /// Opens (or creates) the journal in directory `path`, using the machine's clock.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Opens (or creates) the journal in directory `path` with the given clock.
    pub fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self> {
        let path = path.as_ref();
        let db = open_db(path).map_err(|source| JournalError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let recovery = recover_tail(&db)?;
        let highest_quarantined = db
            .scan_prefix([QUARANTINE_PREFIX])
            .keys()
            .next_back()
            .transpose()?
            .and_then(|k| seq_of_key(&k))
            .unwrap_or(0);
        // A journal that took a history over from a snapshot may hold no record at or after
        // it yet: numbering goes on after the snapshot all the same.
        let latest_snapshot = last_key_seq(&db, SNAPSHOT_PREFIX)?.unwrap_or(0);
        let found = recovery
            .last_good_seq
            .max(highest_quarantined)
            .max(latest_snapshot);
        let flushed = read_mark(path)?;
        if found < flushed {
            return Err(JournalError::Lost {
                path: path.to_path_buf(),
                found,
                flushed,
            });
        }
        let next = found + 1;
        if !recovery.quarantined.is_empty() {
            tracing::warn!(
                quarantined = ?recovery.quarantined,
                last_good_seq = recovery.last_good_seq,
                "Journal had a damaged tail; recovered to the last good record."
            );
        }
        Ok(Journal {
            db,
            path: path.to_path_buf(),
            flushed: Mutex::new(flushed),
            next_seq: Mutex::new(next),
            notifier: Arc::new(Notifier::new(next - 1)),
            clock,
            recovery,
            event_bytes: Mutex::new(None),
            _event: PhantomData,
        })
    }

    /// The time the journal stamps records with, ms since the Unix epoch (virtual in the
    /// simulator), so what the actors write elsewhere agrees with the journal.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// What opening had to repair.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn lock_next_seq(&self) -> MutexGuard<'_, u64> {
        // A panic while holding the lock cannot leave the counter inconsistent with the
        // store: it is only advanced after the batch was applied.
        self.next_seq.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one event; returns its sequence number. Not yet durable: see [`Journal::flush`].
    pub fn append(&self, event: &E) -> Result<u64> {
        Ok(*self.append_batch(std::slice::from_ref(event))?.start())
    }

    /// Appends events atomically (all or none) in one write; returns their sequence numbers.
    pub fn append_batch(&self, events: &[E]) -> Result<std::ops::RangeInclusive<u64>> {
        let mut prepared = Vec::with_capacity(events.len());
        for event in events {
            let entity = event.entity();
            let event_type = event.event_type().to_owned();
            let payload = event.to_payload().map_err(|source| JournalError::Encode {
                event_type: event_type.clone(),
                source,
            })?;
            prepared.push(Prepared {
                schema_version: E::SCHEMA_VERSION,
                kind: entity.kind,
                name: entity.name,
                event_type,
                payload,
            });
        }
        self.write(prepared)
    }

    /// Appends stored records again as they are, payloads not decoded (so a record an old
    /// build wrote keeps its schema version), atomically in one write, under new sequence
    /// numbers and the current time; returns those numbers. What retention must keep from
    /// before a cut is carried past it this way.
    pub fn append_raw(&self, records: Vec<RawRecord>) -> Result<std::ops::RangeInclusive<u64>> {
        self.write(
            records
                .into_iter()
                .map(|r| Prepared {
                    schema_version: r.schema_version,
                    kind: r.kind,
                    name: r.name,
                    event_type: r.event_type,
                    payload: r.payload,
                })
                .collect(),
        )
    }

    fn write(&self, prepared: Vec<Prepared>) -> Result<std::ops::RangeInclusive<u64>> {
        for p in &prepared {
            check_entity(&EntityRef::new(p.kind.as_str(), p.name.as_str()))?;
            if p.event_type.is_empty() || p.event_type.len() > format::MAX_EVENT_TYPE_LEN {
                return Err(JournalError::InvalidEventType(p.event_type.clone()));
            }
        }
        let count = prepared.len() as u64;
        let mut next = self.lock_next_seq();
        let first = *next;
        if prepared.is_empty() {
            return Ok(first..=first.saturating_sub(1));
        }
        let recorded_at_ms = self.clock.now_ms();
        let mut batch = sled::Batch::default();
        let mut bytes = 0;
        for (offset, p) in prepared.into_iter().enumerate() {
            let seq = first + offset as u64;
            batch.insert(&index_key(&p.kind, &p.name, seq)[..], &[][..]);
            let record = RawRecord {
                seq,
                recorded_at_ms,
                schema_version: p.schema_version,
                kind: p.kind,
                name: p.name,
                event_type: p.event_type,
                payload: p.payload,
            };
            let frame = encode_event(&record);
            bytes += frame.len() as u64;
            batch.insert(&event_key(seq)[..], frame);
        }
        self.db.apply_batch(batch)?;
        self.count_bytes(|total| total + bytes);
        let last = first + count - 1;
        *next = last + 1;
        drop(next);
        self.notifier.publish(last);
        Ok(first..=last)
    }

    /// Makes every append so far durable (fsync). Returns once the data is on disk.
    pub fn flush(&self) -> Result<()> {
        let appended = self.lock_next_seq().saturating_sub(1);
        self.db.flush()?;
        let mut flushed = self.flushed.lock().unwrap_or_else(|p| p.into_inner());
        if appended > *flushed {
            write_mark(&self.path, appended)?;
            *flushed = appended;
        }
        Ok(())
    }

    /// The sequence number of the newest stored event, if any.
    pub fn last_seq(&self) -> Result<Option<u64>> {
        Ok(last_key_seq(&self.db, EVENT_PREFIX)?)
    }

    /// The sequence number of the oldest stored event, if any.
    pub fn first_seq(&self) -> Result<Option<u64>> {
        Ok(self
            .db
            .scan_prefix([EVENT_PREFIX])
            .keys()
            .next()
            .transpose()?
            .and_then(|k| seq_of_key(&k)))
    }

    /// Raw records from `seq` (inclusive) in order, without decoding payloads.
    pub fn read_raw_from(&self, seq: u64) -> impl Iterator<Item = Result<RawRecord>> + '_ {
        self.db
            .range(event_key(seq)..=event_key(u64::MAX))
            .map(|item| decode_item(item?))
    }

    /// Events from `seq` (inclusive) in order. Retired event types are left out.
    pub fn read_from(&self, seq: u64) -> impl Iterator<Item = Result<Envelope<E>>> + '_ {
        self.read_raw_from(seq)
            .filter_map(|raw| raw.and_then(decode_record).transpose())
    }

    /// Every event about one entity, in order.
    pub fn by_entity<'a>(
        &'a self,
        kind: &str,
        name: &str,
    ) -> impl Iterator<Item = Result<Envelope<E>>> + 'a {
        self.db
            .scan_prefix(index_prefix(kind, name))
            .keys()
            .filter_map(move |key| {
                let key = match key {
                    Ok(key) => key,
                    Err(e) => return Some(Err(e.into())),
                };
                let seq = seq_of_index_key(&key)?;
                // Index entries whose event was removed by retention or quarantined are stale.
                match self.db.get(event_key(seq)) {
                    Ok(Some(bytes)) => decode_event(seq, &bytes)
                        .map_err(|reason| JournalError::Corrupted { seq, reason })
                        .and_then(decode_record)
                        .transpose(),
                    Ok(None) => None,
                    Err(e) => Some(Err(e.into())),
                }
            })
    }

    /// Follows the journal from `seq` (inclusive): first what is stored, then new appends as
    /// they happen. Never slows writers down, however slowly it is read.
    pub fn tail(&self, seq: u64) -> Tail<E> {
        Tail {
            db: self.db.clone(),
            notifier: self.notifier.clone(),
            next_seq: seq,
            _event: PhantomData,
        }
    }

    /// Stores `state` as the snapshot at `seq` (it must include every event up to `seq`).
    pub fn save_snapshot<S: Serialize>(
        &self,
        seq: u64,
        schema_version: u16,
        state: &S,
    ) -> Result<()> {
        let payload = serde_json::to_vec(state).map_err(|e| JournalError::Snapshot {
            seq,
            message: e.to_string(),
        })?;
        let frame = encode_snapshot(&RawSnapshot {
            seq,
            recorded_at_ms: self.clock.now_ms(),
            schema_version,
            payload,
        });
        self.db.insert(snapshot_key(seq), frame)?;
        Ok(())
    }

    /// The sequence numbers of the stored snapshots, oldest first.
    pub fn snapshot_seqs(&self) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for key in self.db.scan_prefix([SNAPSHOT_PREFIX]).keys() {
            if let Some(seq) = seq_of_key(&key?) {
                out.push(seq);
            }
        }
        Ok(out)
    }

    /// Removes the snapshot at `seq`, if there is one (the events stay).
    pub fn remove_snapshot(&self, seq: u64) -> Result<()> {
        self.db.remove(snapshot_key(seq))?;
        Ok(())
    }

    /// The newest snapshot with `seq <= at_or_before` and the given schema version.
    pub fn latest_snapshot<S: DeserializeOwned>(
        &self,
        at_or_before: u64,
        schema_version: u16,
    ) -> Result<Option<Snapshot<S>>> {
        self.find_snapshot(schema_version, |raw| raw.seq <= at_or_before)
    }

    fn find_snapshot<S: DeserializeOwned>(
        &self,
        schema_version: u16,
        accept: impl Fn(&RawSnapshot) -> bool,
    ) -> Result<Option<Snapshot<S>>> {
        for item in self.db.scan_prefix([SNAPSHOT_PREFIX]).rev() {
            let (key, value) = item?;
            let Some(seq) = seq_of_key(&key) else {
                continue;
            };
            let raw = decode_snapshot(seq, &value)
                .map_err(|reason| JournalError::Corrupted { seq, reason })?;
            if raw.schema_version != schema_version || !accept(&raw) {
                continue;
            }
            let state =
                serde_json::from_slice(&raw.payload).map_err(|e| JournalError::Snapshot {
                    seq,
                    message: e.to_string(),
                })?;
            return Ok(Some(Snapshot {
                seq: raw.seq,
                recorded_at_ms: raw.recorded_at_ms,
                state,
            }));
        }
        Ok(None)
    }

    /// Rebuilds a projection: from the newest usable snapshot, folding the events after it.
    pub fn replay<P: Projection<E>>(&self, until: Until) -> Result<Replayed<P>> {
        let snapshot: Option<Snapshot<P>> = match until {
            Until::End => self.latest_snapshot(u64::MAX, P::SNAPSHOT_VERSION)?,
            Until::Seq(seq) => self.latest_snapshot(seq, P::SNAPSHOT_VERSION)?,
            Until::TimeMs(t) => {
                self.find_snapshot(P::SNAPSHOT_VERSION, |raw| raw.recorded_at_ms <= t)?
            }
        };
        let (mut state, base) = match snapshot {
            Some(s) => (s.state, Some(s.seq)),
            None => (P::default(), None),
        };
        let start = base.map_or(1, |s| s + 1);
        if let Some(first) = self.first_seq()?
            && first > start
        {
            return Err(JournalError::Truncated {
                requested: start,
                first_available: first,
            });
        }
        let mut last_seq = base.unwrap_or(0);
        let mut events_applied = 0;
        for envelope in self.read_from(start) {
            let envelope = envelope?;
            let past_end = match until {
                Until::End => false,
                Until::Seq(seq) => envelope.seq > seq,
                Until::TimeMs(t) => envelope.recorded_at_ms > t,
            };
            if past_end {
                break;
            }
            state.apply(&envelope);
            last_seq = envelope.seq;
            events_applied += 1;
        }
        Ok(Replayed {
            state,
            last_seq,
            from_snapshot: base,
            events_applied,
        })
    }

    /// Removes old history according to `policy`, never anything newer than the latest
    /// snapshot, and drops snapshots no event history remains behind.
    pub fn apply_retention(&self, policy: RetentionPolicy) -> Result<RetentionReport> {
        match self.retention_cut(policy)? {
            Some(cut) => self.remove_through(cut),
            None => Ok(RetentionReport {
                first_seq: self.first_seq()?.unwrap_or(0),
                ..RetentionReport::default()
            }),
        }
    }

    /// The last sequence number `policy` would remove: the longest prefix of events, none
    /// newer than the latest snapshot, whose removal leaves the events within `max_bytes`
    /// and none older than `max_age`. `None` when nothing is to go.
    pub fn retention_cut(&self, policy: RetentionPolicy) -> Result<Option<u64>> {
        let Some(latest_snapshot) = last_key_seq(&self.db, SNAPSHOT_PREFIX)? else {
            return Ok(None);
        };
        let now = self.clock.now_ms();
        let max_age_ms = policy.max_age.map(|d| d.as_millis() as i64);
        let mut remaining = match policy.max_bytes {
            Some(_) => self.event_bytes()?,
            None => 0,
        };
        let mut cut = None;
        for item in self.db.range(event_key(0)..=event_key(latest_snapshot)) {
            let (key, value) = item?;
            let Some(seq) = seq_of_key(&key) else {
                continue;
            };
            let too_big = policy.max_bytes.is_some_and(|max| remaining > max);
            let too_old = match max_age_ms {
                Some(max) => decode_event_header(seq, &value)
                    .is_ok_and(|header| now.saturating_sub(header.recorded_at_ms) > max),
                None => false,
            };
            if !(too_big || too_old) {
                break;
            }
            remaining = remaining.saturating_sub(value.len() as u64);
            cut = Some(seq);
        }
        Ok(cut)
    }

    /// Removes every event up to and including `cut` (never past the latest snapshot: the
    /// cut is lowered to it), with the snapshots no event history remains behind.
    pub fn remove_through(&self, cut: u64) -> Result<RetentionReport> {
        let latest_snapshot = last_key_seq(&self.db, SNAPSHOT_PREFIX)?.unwrap_or(0);
        let cut = cut.min(latest_snapshot);
        let mut report = RetentionReport::default();
        if cut > 0 {
            let mut batch = sled::Batch::default();
            for item in self.db.range(event_key(0)..=event_key(cut)) {
                let (key, value) = item?;
                let Some(seq) = seq_of_key(&key) else {
                    continue;
                };
                if let Ok(header) = decode_event_header(seq, &value) {
                    batch.remove(index_key(&header.kind, &header.name, seq));
                }
                batch.remove(&key);
                report.removed_events += 1;
                report.removed_bytes += value.len() as u64;
            }
            if report.removed_events > 0 {
                for key in self.db.range(snapshot_key(0)..snapshot_key(cut)).keys() {
                    batch.remove(key?);
                    report.removed_snapshots += 1;
                }
            }
            // Appends wait, so the byte count moves with the store.
            let _appends = self.lock_next_seq();
            self.db.apply_batch(batch)?;
            let removed = report.removed_bytes;
            self.count_bytes(|total| total.saturating_sub(removed));
        }
        report.first_seq = self.first_seq()?.unwrap_or(0);
        Ok(report)
    }

    /// Bytes of the stored event records.
    pub fn event_bytes(&self) -> Result<u64> {
        // Appends and removals wait while the records are counted (lock order: the
        // sequence counter, then the byte count).
        let _appends = self.lock_next_seq();
        let mut known = self.event_bytes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(total) = *known {
            return Ok(total);
        }
        let mut total: u64 = 0;
        for item in self.db.scan_prefix([EVENT_PREFIX]).values() {
            total += item?.len() as u64;
        }
        *known = Some(total);
        Ok(total)
    }

    /// Updates the byte count, once it is known.
    fn count_bytes(&self, update: impl FnOnce(u64) -> u64) {
        let mut known = self.event_bytes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(total) = known.as_mut() {
            *total = update(*total);
        }
    }

    /// Reads every record and snapshot and checks its frame. Returns the number of events.
    pub fn verify(&self) -> Result<u64> {
        let mut count = 0;
        for raw in self.read_raw_from(0) {
            raw?;
            count += 1;
        }
        for item in self.db.scan_prefix([SNAPSHOT_PREFIX]) {
            let (key, value) = item?;
            let seq = seq_of_key(&key).unwrap_or(0);
            decode_snapshot(seq, &value)
                .map_err(|reason| JournalError::Corrupted { seq, reason })?;
        }
        Ok(count)
    }

    /// Bytes of the quarantined (damaged tail) records, by sequence number.
    pub fn quarantined(&self) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        for item in self.db.scan_prefix([QUARANTINE_PREFIX]) {
            let (key, value) = item?;
            if let Some(seq) = seq_of_key(&key) {
                out.push((seq, value.to_vec()));
            }
        }
        Ok(out)
    }
}

/// The last sequence number [`FLUSHED_FILE`] holds; 0 when there is none (a new journal, or
/// one written before the mark existed).
fn read_mark(dir: &Path) -> Result<u64> {
    let path = dir.join(FLUSHED_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| JournalError::Mark {
            path,
            message: format!(
                "holds {:?}, not a sequence number; delete it to accept what the database holds",
                text.trim()
            ),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(JournalError::Mark {
            path,
            message: e.to_string(),
        }),
    }
}

/// Written after the data it counts is durable, and replaced whole (write, then rename), so
/// it never claims more than the database holds; after a power loss it may claim less.
fn write_mark(dir: &Path, seq: u64) -> Result<()> {
    let path = dir.join(FLUSHED_FILE);
    let partial = dir.join(format!("{FLUSHED_FILE}.partial"));
    std::fs::write(&partial, format!("{seq}\n"))
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| JournalError::Mark {
            path,
            message: e.to_string(),
        })
}

/// The storage engine's page cache. Its default (1 GiB) lets a long-running process's memory
/// grow with its journal; reads are mostly of recent records, which this holds.
pub const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// Opens the sled database, waiting (bounded) for a previous handle in this process to let go
/// of the file lock: sled releases it from its background flusher thread, after `drop`.
pub fn open_db(path: &Path) -> Result<sled::Db, sled::Error> {
    const ATTEMPTS: u32 = 100;
    let mut attempt = 0;
    loop {
        match sled::Config::new()
            .path(path)
            .cache_capacity(CACHE_BYTES)
            .open()
        {
            Err(sled::Error::Io(e))
                if attempt < ATTEMPTS && e.to_string().contains("could not acquire lock") =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result,
        }
    }
}

fn last_key_seq(db: &sled::Db, prefix: u8) -> Result<Option<u64>, sled::Error> {
    Ok(db
        .scan_prefix([prefix])
        .keys()
        .next_back()
        .transpose()?
        .and_then(|k| seq_of_key(&k)))
}

fn decode_item((key, value): (sled::IVec, sled::IVec)) -> Result<RawRecord> {
    let seq = seq_of_key(&key).unwrap_or(0);
    decode_event(seq, &value).map_err(|reason| JournalError::Corrupted { seq, reason })
}

/// Decodes a raw record's payload into an envelope; `None` for a retired event type.
pub fn decode_record<E: JournalEvent>(raw: RawRecord) -> Result<Option<Envelope<E>>> {
    let decoded =
        E::from_payload(&raw.event_type, raw.schema_version, &raw.payload).map_err(|message| {
            JournalError::Decode {
                seq: raw.seq,
                event_type: raw.event_type.clone(),
                schema_version: raw.schema_version,
                message,
            }
        })?;
    Ok(decoded.map(|event| Envelope {
        seq: raw.seq,
        recorded_at_ms: raw.recorded_at_ms,
        entity: EntityRef {
            kind: raw.kind,
            name: raw.name,
        },
        event_type: raw.event_type,
        schema_version: raw.schema_version,
        event,
    }))
}

/// Walks back from the newest event record and quarantines every damaged one until a good
/// record is found. Index entries that point past the last good record are removed.
fn recover_tail(db: &sled::Db) -> Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let mut batch = sled::Batch::default();
    for item in db.scan_prefix([EVENT_PREFIX]).rev() {
        let (key, value) = item?;
        let Some(seq) = seq_of_key(&key) else {
            batch.remove(key);
            continue;
        };
        if decode_event(seq, &value).is_ok() {
            report.last_good_seq = seq;
            break;
        }
        batch.insert(&quarantine_key(seq)[..], value);
        batch.remove(key);
        report.quarantined.push(seq);
    }
    if report.quarantined.is_empty() {
        return Ok(report);
    }
    report.quarantined.reverse();
    for key in db.scan_prefix([INDEX_PREFIX]).keys() {
        let key = key?;
        if seq_of_index_key(&key).is_some_and(|seq| seq > report.last_good_seq) {
            batch.remove(key);
        }
    }
    db.apply_batch(batch)?;
    db.flush()?;
    Ok(report)
}

/// A reader following the journal; see [`Journal::tail`].
pub struct Tail<E> {
    db: sled::Db,
    notifier: Arc<Notifier>,
    next_seq: u64,
    _event: PhantomData<fn() -> E>,
}

impl<E: JournalEvent> Tail<E> {
    /// The next stored event at or after the cursor, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Envelope<E>>> {
        loop {
            let Some(item) = self
                .db
                .range(event_key(self.next_seq)..=event_key(u64::MAX))
                .next()
            else {
                return Ok(None);
            };
            let raw = decode_item(item?)?;
            self.next_seq = raw.seq + 1;
            if let Some(envelope) = decode_record(raw)? {
                return Ok(Some(envelope));
            }
        }
    }

    /// The next event, waiting up to `timeout` for one to be appended.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Envelope<E>>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(envelope) = self.try_next()? {
                return Ok(Some(envelope));
            }
            let now = std::time::Instant::now();
            if now >= deadline || !self.notifier.wait_for(self.next_seq, deadline - now) {
                return self.try_next();
            }
        }
    }

    /// The next event, waiting asynchronously for one to be appended.
    pub async fn next(&mut self) -> Result<Envelope<E>> {
        loop {
            if let Some(envelope) = self.try_next()? {
                return Ok(envelope);
            }
            self.notifier.published(self.next_seq).await;
        }
    }

    /// The sequence number the next returned event will have at least.
    pub fn position(&self) -> u64 {
        self.next_seq
    }
}
