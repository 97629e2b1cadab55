//! Version 1 stored form of the journal's records about its own history.

use serde::{Deserialize, Serialize};

/// A process took the stored history over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Takeover {
    /// Its identity.
    pub holder: String,
    /// The store (`s3://bucket/prefix`).
    pub location: String,
    /// The last sequence number the store held.
    pub through: u64,
    /// The stored snapshot it started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<u64>,
    /// Records copied from the store.
    pub imported: u64,
    /// Segments read.
    pub segments: u64,
    /// Its own journal, set aside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<SetAside>,
}

/// A local journal moved out of the way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAside {
    /// Where to.
    pub path: String,
    /// Its last sequence number.
    pub last: u64,
}
