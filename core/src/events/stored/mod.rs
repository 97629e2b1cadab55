//! The journal's stored schema: every [`DomainEvent`] is written as the current version's
//! stored form and read back from any version this build knows, so the domain types (the
//! scheduler's pods and nodes, instance types, instances) can change without changing what
//! recorded journals hold.
//!
//! Each version is a module of plain serde types (`v1`) with conversions both ways
//! (`convert`). The law, checked for every event by a property test: reading what was
//! written gives the event back. Golden files (`core/tests/golden/events-v1*.jsonl`)
//! pin each version's bytes. A change the current version cannot absorb additively (a new
//! optional field, a new event type) is a new version: a `v2` module, [`CURRENT`] raised, and
//! `decode` upcasting version 1 payloads through `v1`'s conversions.

use crate::events::DomainEvent;
use crate::model::InstanceType;

mod convert;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_disruption;
pub mod v1;

/// The version payloads are written at.
pub const CURRENT: u16 = 1;

/// The payload of `event` at [`CURRENT`].
pub fn encode(event: &DomainEvent) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&v1::Event::from(event))
}

/// Reads a payload of `event_type` written at `version`; `Ok(None)` for an event type this
/// build no longer acts on (none yet).
pub fn decode(
    event_type: &str,
    version: u16,
    payload: &[u8],
) -> Result<Option<DomainEvent>, String> {
    match version {
        1 => {
            let stored: v1::Event =
                serde_json::from_slice(payload).map_err(|e| format!("{event_type}: {e}"))?;
            stored
                .into_event()
                .map(Some)
                .map_err(|e| format!("{event_type}: {e}"))
        }
        v => Err(format!(
            "{event_type}: unknown schema version {v} (written by a newer karpenter?)"
        )),
    }
}

/// An instance type as the current version stores it, serialized: what catalog digests hash,
/// so a digest names the stored content whatever the domain type holds.
pub fn instance_type_bytes(t: &InstanceType) -> Vec<u8> {
    serde_json::to_vec(&convert::instance_type(t)).unwrap_or_default()
}
