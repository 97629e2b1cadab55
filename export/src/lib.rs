//! The journal as typed tables for query engines (`karpenter journal export --format
//! parquet`): what a platform team asks of forty clusters — what the fleet cost by day,
//! which pods waited longest and why, what each disruption reason saved — answered by
//! DuckDB, Athena or Spark over files, with no karpenter-rs code in the loop.
//!
//! - [`rows`]: the tables read from the events in one pass (pure).
//! - [`figures`]: the same questions answered in Rust over the tables, for the reports
//!   (the figures the SQL over the files must give).
//! - [`parquet`]: the files, partitioned by cluster and day.
//!
//! | table | one row per | partitioned by the day of |
//! |---|---|---|
//! | `nodeclaims` | NodeClaim: lifecycle times, instance, price, hours run, cost, what disrupted it | first seen |
//! | `pods` | wait of a pod: pending to bound (or deleted, or still pending), rounds, why | pending |
//! | `disruptions` | disruption command: method, reason, candidates, savings, outcome | decided |
//! | `rounds` | scheduling round: pods, NodeClaims, $/h planned, FFD and the lower bound | finished |
//! | `fleet` | stretch of time the running instances did not change: $/h, nodes | start |

pub mod figures;
pub mod parquet;
pub mod rows;

use karpenter_core::events::{ClusterView, DomainEvent};
use karpenter_journal::{Journal, JournalError, Until};

pub use rows::Tables;

/// Reads every event `journal` holds into [`Tables`]; a journal retention trimmed starts
/// from the state its oldest snapshot holds.
pub fn project(journal: &Journal<DomainEvent>) -> Result<Tables, JournalError> {
    let Some(first) = journal.first_seq()? else {
        return Ok(Tables::default());
    };
    let mut projector = if first > 1 {
        let at = journal
            .read_raw_from(first)
            .next()
            .transpose()?
            .map_or(0, |r| r.recorded_at_ms);
        let view = journal.replay::<ClusterView>(Until::Seq(first - 1))?.state;
        rows::Projector::after(&view, at)
    } else {
        rows::Projector::default()
    };
    for envelope in journal.read_from(first) {
        projector.observe(&envelope?);
    }
    Ok(projector.finish())
}
