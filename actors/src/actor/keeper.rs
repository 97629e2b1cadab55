//! The journal keeper: keeps a long-running controller's journal bounded.
//!
//! It follows the journal with the replay's fold ([`ClusterView`]) and, every
//! `snapshot_every`:
//! - saves the view as a snapshot, so a restart folds at most that much history; snapshots
//!   older than the latest are dropped unless they are checkpoints (one per
//!   `checkpoint_every`), which retention cuts at;
//! - applies retention: history older than `max_age`, or beyond `max_bytes`, is removed up to
//!   the newest checkpoint before that point (so every moment still stored can be replayed).
//!   The instance-type sets that records after the cut refer to, and those the scheduler
//!   takes as recorded (asked at each cut; no answer, no cut), are first recorded again, and
//!   the cut is journaled (`JournalTrimmed`). When the journal is shipped, nothing the
//!   history store does not hold yet is removed.

use std::time::Duration;

use karpenter_journal::{Projection as _, RetentionPolicy, Until};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};

use super::messages::{KeeperMsg, KeeperStatus, SchedulerMsg};
use super::{ASK_MS, Context};
use karpenter_core::events::{ClusterView, DomainEvent};

/// How the keeper snapshots and trims the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalKeeping {
    /// How often the view is snapshotted (and retention applied).
    pub snapshot_every: Duration,
    /// Snapshots this far apart are kept as checkpoints; the others are dropped once a newer
    /// one exists.
    pub checkpoint_every: Duration,
    /// What history to keep.
    pub retention: RetentionPolicy,
}

impl Default for JournalKeeping {
    fn default() -> Self {
        JournalKeeping {
            snapshot_every: Duration::from_secs(600),
            checkpoint_every: Duration::from_secs(6 * 3600),
            retention: RetentionPolicy {
                max_bytes: Some(64 * 1024 * 1024),
                max_age: Some(Duration::from_secs(24 * 3600)),
            },
        }
    }
}

/// A scheduler takes an instance-type set as recorded for this long after it last used it;
/// after that it records the set again before using it. A restarted scheduler takes as
/// recorded the sets the journal holds that were used this recently.
pub const CATALOG_REMEMBERED: Duration = Duration::from_secs(3600);

/// The keeper actor.
pub struct KeeperActor;

/// Its state.
pub struct KeeperState {
    ctx: Context,
    scheduler: ActorRef<SchedulerMsg>,
    keeping: JournalKeeping,
    view: ClusterView,
    /// The last sequence number folded into `view`.
    folded: u64,
    /// The latest snapshot, unless it is a checkpoint (then it stays).
    droppable: Option<u64>,
    /// When the last checkpoint was taken (journal clock, ms).
    checkpoint_ms: Option<i64>,
    status: KeeperStatus,
}

impl Actor for KeeperActor {
    type Msg = KeeperMsg;
    type State = KeeperState;
    type Arguments = (Context, ActorRef<SchedulerMsg>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (ctx, scheduler): (Context, ActorRef<SchedulerMsg>),
    ) -> Result<Self::State, ActorProcessingErr> {
        let replayed = ctx.journal.replay::<ClusterView>(Until::End)?;
        let keeping = ctx.settings.keeping;
        myself.send_interval(keeping.snapshot_every, || KeeperMsg::Run);
        Ok(KeeperState {
            ctx,
            scheduler,
            keeping,
            view: replayed.state,
            folded: replayed.last_seq,
            droppable: None,
            checkpoint_ms: None,
            status: KeeperStatus::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            KeeperMsg::Run => {
                if let Err(error) = state.pass().await {
                    state.status.failures += 1;
                    warn!(%error, "Journal snapshot or retention failed; retrying next interval.");
                }
            }
            KeeperMsg::GetStatus(reply) => {
                let _ = reply.send(state.status);
            }
            KeeperMsg::OpenLaunches(reply) => {
                // No answer (the port dropped) when the journal cannot be read: the asker
                // must not act on an incomplete list.
                match state.fold() {
                    Ok(()) => {
                        let _ = reply.send(state.view.open_launches());
                    }
                    Err(error) => {
                        warn!(%error, "Could not read the journal's launch intents.");
                    }
                }
            }
        }
        Ok(())
    }
}

impl KeeperState {
    async fn pass(&mut self) -> Result<(), ActorProcessingErr> {
        self.fold()?;
        self.snapshot()?;
        self.trim().await?;
        Ok(())
    }

    /// Folds what was appended since the last pass (instance-type payloads undecoded).
    fn fold(&mut self) -> Result<(), ActorProcessingErr> {
        for raw in self.ctx.journal.read_raw_from(self.folded + 1) {
            let raw = raw?;
            let seq = raw.seq;
            self.view.apply_raw(raw)?;
            self.folded = seq;
        }
        Ok(())
    }

    fn snapshot(&mut self) -> Result<(), ActorProcessingErr> {
        if self.folded == 0 || self.folded == self.status.snapshot_seq {
            return Ok(());
        }
        let journal = &self.ctx.journal;
        journal.save_snapshot(self.folded, ClusterView::SNAPSHOT_VERSION, &self.view)?;
        self.status.snapshots += 1;
        self.status.snapshot_seq = self.folded;
        if let Some(previous) = self.droppable.take() {
            journal.remove_snapshot(previous)?;
        }
        let now = journal.now_ms();
        let every = self.keeping.checkpoint_every.as_millis() as i64;
        if self.checkpoint_ms.is_none_or(|at| now - at >= every) {
            self.checkpoint_ms = Some(now);
            self.status.checkpoints += 1;
        } else {
            self.droppable = Some(self.folded);
        }
        Ok(())
    }

    /// Removes history the retention policy lets go, up to the newest checkpoint before
    /// its cut.
    async fn trim(&mut self) -> Result<(), ActorProcessingErr> {
        let journal = self.ctx.journal.clone();
        let Some(mut cut) = journal.retention_cut(self.keeping.retention)? else {
            return Ok(());
        };
        // Records not yet in the history store stay until they are.
        if let Some(shipping) = &self.ctx.shipping {
            cut = cut.min(shipping.shipped());
        }
        let Some(cut) = journal
            .snapshot_seqs()?
            .into_iter()
            .filter(|seq| *seq <= cut && Some(*seq) != self.droppable)
            .max()
        else {
            return Ok(());
        };
        let remembered = ractor::call_t!(self.scheduler, SchedulerMsg::RecordedCatalogs, ASK_MS)
            .map_err(|e| {
                format!("the scheduler did not say which instance types it counts on: {e}")
            })?;
        let carry = self.view.catalogs_to_carry(cut, &remembered);
        let mut copies = Vec::with_capacity(carry.len());
        for (digest, seq) in &carry {
            match journal.read_raw_from(*seq).next().transpose()? {
                Some(raw) if raw.seq == *seq && DomainEvent::is_catalog_record(&raw, digest) => {
                    copies.push(raw);
                }
                _ => {
                    return Err(format!(
                        "instance types {digest} are not at sequence number {seq} as the view says; not trimming"
                    )
                    .into());
                }
            }
        }
        let carried = copies.len() as u64;
        journal.append_raw(copies)?;
        let report = journal.remove_through(cut)?;
        if report.removed_events == 0 {
            return Ok(());
        }
        self.ctx.record(&[DomainEvent::JournalTrimmed {
            through: cut,
            events: report.removed_events,
            bytes: report.removed_bytes,
        }])?;
        self.status.trims += 1;
        self.status.trimmed_through = cut;
        self.status.removed_events += report.removed_events;
        self.status.removed_bytes += report.removed_bytes;
        self.status.catalogs_carried += carried;
        info!(
            through = cut,
            events = report.removed_events,
            bytes = report.removed_bytes,
            carried,
            "Journal history trimmed."
        );
        Ok(())
    }
}
