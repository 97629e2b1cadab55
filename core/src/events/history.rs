//! What the journal records of its own history in the store: how far it was shipped
//! (`JournalShipped`) and a process taking the history over (`HistoryTakenOver`: a new
//! leader after a failover, a rescheduled pod, an upgrade).

use serde::{Deserialize, Serialize};

/// A process took the stored history over and goes on writing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    /// Who: the process's identity (its pod name, as in the leader-election Lease).
    pub holder: String,
    /// Where the history lives (`s3://bucket/prefix`).
    pub location: String,
    /// The last sequence number the store held: where this process goes on from.
    pub through: u64,
    /// The stored snapshot it started from, when its own journal could not be continued.
    pub snapshot: Option<u64>,
    /// Records copied from the store into its journal.
    pub imported: u64,
    /// Segments read.
    pub segments: u64,
    /// Its own journal's records that were not part of the stored history (written after
    /// the last upload by a process that lost the history to another), set aside.
    pub set_aside: Option<SetAside>,
}

/// A local journal moved out of the way because it disagreed with the stored history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAside {
    /// Where it was moved to.
    pub path: String,
    /// Its last sequence number.
    pub last: u64,
}
