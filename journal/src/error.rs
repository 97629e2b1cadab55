use std::path::PathBuf;

use crate::format::FrameError;

/// Everything that can go wrong reading or writing the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database at `path` could not be opened (missing permissions, held by another process, …).
    #[error("cannot open journal at {path}: {source}")]
    Open {
        /// The directory given to `Journal::open`.
        path: PathBuf,
        /// What sled reported.
        #[source]
        source: sled::Error,
    },
    /// The storage engine failed while reading or writing.
    #[error("journal storage failed: {0}")]
    Storage(#[from] sled::Error),
    /// An event could not be serialized.
    #[error("cannot encode {event_type} event: {source}")]
    Encode {
        /// The event type being written.
        event_type: String,
        /// What serde reported.
        #[source]
        source: serde_json::Error,
    },
    /// A stored payload could not be turned back into a domain event.
    #[error("cannot decode event {seq} ({event_type} v{schema_version}): {message}")]
    Decode {
        /// Sequence number of the record.
        seq: u64,
        /// Its event type.
        event_type: String,
        /// Its payload schema version.
        schema_version: u16,
        /// Why decoding failed.
        message: String,
    },
    /// A record before the tail is damaged: the journal does not skip it silently.
    #[error(
        "journal record {seq} is damaged ({reason}); run `karpenter journal verify` and restore from a copy"
    )]
    Corrupted {
        /// Sequence number (from the key) of the damaged record.
        seq: u64,
        /// What is wrong with it.
        reason: FrameError,
    },
    /// The entity reference cannot be stored.
    #[error("invalid entity {kind}/{name}: {reason}")]
    InvalidEntity {
        /// Kind given.
        kind: String,
        /// Name given.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The event type name cannot be stored.
    #[error("invalid event type {0:?}: must be 1..=255 bytes")]
    InvalidEventType(String),
    /// A snapshot could not be encoded or decoded.
    #[error("snapshot at seq {seq}: {message}")]
    Snapshot {
        /// Sequence number of the snapshot.
        seq: u64,
        /// What went wrong.
        message: String,
    },
    /// The requested history was removed by retention.
    #[error(
        "events before seq {first_available} were removed by retention; cannot rebuild seq {requested}"
    )]
    Truncated {
        /// What the caller asked for.
        requested: u64,
        /// The oldest sequence number still rebuildable.
        first_available: u64,
    },
    /// Records made durable earlier are gone: the database files were damaged before them
    /// (the storage engine stops reading at the damage).
    #[error(
        "journal at {path} ends at record {found} but records up to {flushed} were made durable: the files are damaged; restore them from a copy, or delete {path}/{file} to accept the loss",
        file = crate::FLUSHED_FILE
    )]
    Lost {
        /// The journal directory.
        path: PathBuf,
        /// The last record the database still holds (damaged tail records included).
        found: u64,
        /// The last record a flush made durable.
        flushed: u64,
    },
    /// A segment cannot be added to this journal.
    #[error("cannot add segment {range} to the journal: {reason}")]
    Import {
        /// The segment's range, `(after, last]`.
        range: String,
        /// Why.
        reason: String,
    },
    /// The durable high-water mark could not be read or written.
    #[error("journal high-water mark {path}: {message}")]
    Mark {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Shorthand for journal results.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;
