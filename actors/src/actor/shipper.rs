//! The journal shipper: copies the leader's journal to the history store (S3), so the
//! history outlives the pod. Every `every` (a minute) it seals the records after the
//! shipped position into segments ([`karpenter_journal::segment`]) and stores each under a
//! name saying its range, never replacing an object, then the newest snapshot the shipped
//! records reach, and journals how far it got (`JournalShipped`). A clean stop ships once
//! more after the actors stopped ([`Shipper::finish`]), so the store ends where the journal
//! does; a killed process loses at most the records of the last interval from the store
//! (the next leader goes on from what is stored).
//!
//! - **Nothing uploaded twice or skipped.** The position moves past a segment only once
//!   the store holds it. Before each pass the segments stored after the position are
//!   looked at: one holding this journal's records (stored, but the reply was lost) moves
//!   the position on; any other means another writer. A name stored already must hold the
//!   same bytes. Names chain (each segment starts where the one before ended), so a
//!   skipped range would be a gap that readers refuse.
//! - **One writer.** A segment after the position that this journal did not write means
//!   another process continues the history (a second leader): shipping stops, says so and
//!   keeps the records. With leader election, nothing is stored once this replica stops
//!   leading ([`Shipping::leading`], looked at before every put): a leader steps down
//!   at its renew deadline, before any other replica may take the Lease, so a deposed
//!   leader's put races the next leader's takeover only when it is slower than the gap
//!   between the two (5 s by default).
//! - **Never blocking the controller.** It is an actor of its own; a failing store (down,
//!   throttling, a missing permission) costs only lag, shown in
//!   `karpenter_journal_upload_lag_seconds`. The local journal keeps everything until
//!   shipped: the keeper never trims past [`Shipping::shipped`].
//! - An idle journal is not shipped again and again: a pass whose only new record is its
//!   own `JournalShipped` ships nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use karpenter_core::events::DomainEvent;
use karpenter_core::ports::history::{HistoryError, HistoryStore, Stored};
use karpenter_journal::segment::{
    SEGMENTS, decode_segment, parse_segment_name, segment_name, segments_from, snapshot_name,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::{info, warn};

use super::Context;

/// How the journal is shipped, shared with the keeper (which trims no further than
/// [`Shipping::shipped`]).
pub struct Shipping {
    /// Where to.
    pub store: Arc<dyn HistoryStore>,
    /// How often.
    pub every: Duration,
    /// About how large a segment may grow.
    pub segment_bytes: usize,
    /// Whether this replica leads (with leader election); nothing is stored while it does
    /// not. `None`: always.
    pub leading: Option<tokio::sync::watch::Receiver<bool>>,
    /// The last sequence number the store holds.
    shipped: AtomicU64,
}

impl std::fmt::Debug for Shipping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipping")
            .field("store", &self.store.location())
            .field("every", &self.every)
            .field("shipped", &self.shipped())
            .finish()
    }
}

/// A segment holds up to this much (the store's objects stay small enough to read whole).
pub const SEGMENT_BYTES: usize = 4 * 1024 * 1024;

/// How often the journal is shipped.
pub const SHIP_EVERY: Duration = Duration::from_secs(60);

impl Shipping {
    /// Shipping to `store`, which holds the history up to `shipped` (what the takeover
    /// found).
    pub fn new(store: Arc<dyn HistoryStore>, shipped: u64) -> Self {
        Shipping {
            store,
            every: SHIP_EVERY,
            segment_bytes: SEGMENT_BYTES,
            leading: None,
            shipped: AtomicU64::new(shipped),
        }
    }

    /// The last sequence number the store holds.
    pub fn shipped(&self) -> u64 {
        self.shipped.load(Ordering::Acquire)
    }

    /// Refuses to store anything once this replica no longer leads.
    fn fence(&self) -> Result<(), ShipError> {
        match &self.leading {
            Some(leading) if !*leading.borrow() => Err(ShipError::NotLeading {
                location: self.store.location().to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

/// Messages to the shipper.
#[derive(Debug)]
pub enum ShipperMsg {
    /// Ship what is new.
    Ship,
    /// Ship what is new and reply how far the store reaches (a clean stop).
    Flush(RpcReplyPort<Result<u64, String>>),
    /// Totals so far.
    GetStatus(RpcReplyPort<ShipperStatus>),
}

/// Totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShipperStatus {
    /// Where the history goes.
    pub location: String,
    /// The last sequence number the store holds.
    pub shipped: u64,
    /// Segments stored.
    pub segments: u64,
    /// Bytes of segments stored.
    pub bytes: u64,
    /// Snapshots stored.
    pub snapshots: u64,
    /// Passes that failed.
    pub failures: u64,
    /// Why the last pass failed, if it did.
    pub last_error: Option<String>,
    /// Another writer continues the history, or this replica no longer leads: shipping
    /// stopped.
    pub superseded: bool,
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] HistoryError),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] karpenter_journal::JournalError),
    /// This replica lost the Lease: the history is the next leader's.
    #[error("this replica no longer leads: nothing more is stored in {location}")]
    NotLeading {
        /// Where the history is.
        location: String,
    },
    /// Another process writes the history.
    #[error(
        "another writer continues the history in {location}: {found} follows seq {shipped}, which this controller did not write; shipping stopped (is a second leader running?)"
    )]
    Superseded {
        /// The store.
        location: String,
        /// Our position.
        shipped: u64,
        /// The object found.
        found: String,
    },
}

/// The shipping itself, apart from the actor (tests drive it directly).
pub struct Shipper {
    ctx: Context,
    shipping: Arc<Shipping>,
    status: ShipperStatus,
    /// The newest snapshot stored.
    snapshot_shipped: u64,
}

impl Shipper {
    /// A shipper for `ctx`'s journal.
    pub fn new(ctx: Context, shipping: Arc<Shipping>) -> Self {
        let status = ShipperStatus {
            location: shipping.store.location().to_owned(),
            shipped: shipping.shipped(),
            ..ShipperStatus::default()
        };
        Shipper {
            ctx,
            shipping,
            status,
            snapshot_shipped: 0,
        }
    }

    /// Totals so far.
    pub fn status(&self) -> &ShipperStatus {
        &self.status
    }

    /// One pass: checks no one else writes the history, ships every sealed segment after
    /// the position and the newest snapshot it reaches, journals the new position and
    /// sets the lag gauge. Returns the position.
    pub async fn ship(&mut self) -> Result<u64, ShipError> {
        if self.status.superseded {
            return Ok(self.shipping.shipped());
        }
        let result = self.pass().await;
        match &result {
            Ok(_) => self.status.last_error = None,
            Err(error) => {
                self.status.failures += 1;
                self.status.last_error = Some(error.to_string());
                self.status.superseded |= matches!(
                    error,
                    ShipError::Superseded { .. } | ShipError::NotLeading { .. }
                );
                self.ctx.metrics.journal_upload_failed(error_label(error));
            }
        }
        self.update_lag()?;
        result
    }

    async fn pass(&mut self) -> Result<u64, ShipError> {
        let journal = self.ctx.journal.clone();
        let start = self.shipping.shipped();
        if !self.anything_new(start)? {
            return Ok(start);
        }
        let mut shipped = self.reconcile(start).await?;
        let (mut segments, mut bytes) = (0, 0);
        while let Some(sealed) = journal.seal_segment(shipped, self.shipping.segment_bytes)? {
            let name = segment_name(sealed.header.range);
            let size = sealed.bytes.len() as u64;
            self.put_segment(&name, sealed.bytes).await?;
            shipped = self.advance(sealed.header.range.last);
            self.status.segments += 1;
            self.status.bytes += size;
            self.ctx.metrics.journal_uploaded(size);
            (segments, bytes) = (segments + 1, bytes + size);
        }
        self.ship_snapshot(shipped).await?;
        if segments > 0 {
            journal.append(&DomainEvent::JournalShipped {
                through: shipped,
                segments,
                bytes,
            })?;
            info!(
                location = self.shipping.store.location(),
                through = shipped,
                segments,
                bytes,
                "Journal shipped."
            );
        }
        Ok(shipped)
    }

    /// A clean stop's last pass, once nothing else writes the journal: ships what is new,
    /// then the `JournalShipped` that records it (and journals nothing more), so the store
    /// ends where the journal does.
    pub async fn finish(&mut self) -> Result<u64, ShipError> {
        self.ship().await?;
        let mut shipped = self.shipping.shipped();
        if self.status.superseded {
            return Ok(shipped);
        }
        while let Some(sealed) = self
            .ctx
            .journal
            .seal_segment(shipped, self.shipping.segment_bytes)?
        {
            self.put_segment(&segment_name(sealed.header.range), sealed.bytes)
                .await?;
            shipped = self.advance(sealed.header.range.last);
        }
        self.update_lag()?;
        Ok(shipped)
    }

    fn advance(&mut self, shipped: u64) -> u64 {
        self.shipping.shipped.store(shipped, Ordering::Release);
        self.status.shipped = shipped;
        shipped
    }

    /// Whether records other than this shipper's own last `JournalShipped` follow `after`.
    fn anything_new(&self, after: u64) -> Result<bool, ShipError> {
        let mut new = self.ctx.journal.read_raw_from(after.saturating_add(1));
        match (new.next().transpose()?, new.next().transpose()?) {
            (None, _) => Ok(false),
            (Some(only), None) => Ok(only.event_type != "JournalShipped"),
            (Some(_), Some(_)) => Ok(true),
        }
    }

    /// The position the store really holds: segments after `shipped` that hold this
    /// journal's records (stored, but the reply lost, or the pass stopped before it moved
    /// the position) move it on; any other segment there means another writer.
    async fn reconcile(&mut self, shipped: u64) -> Result<u64, ShipError> {
        let store = &self.shipping.store;
        // Names sort as ranges: every segment starting at `shipped` or later sorts after
        // this (one starting before it and reaching past it was refused by the takeover).
        let after = segments_from(shipped);
        let names = store.list(SEGMENTS, Some(&after)).await?;
        let mut at = shipped;
        for name in names {
            let Some(range) = parse_segment_name(&name) else {
                continue;
            };
            let ours = range.after == at
                && match store.get(&name).await? {
                    Some(bytes) => self.holds_ours(&bytes)?,
                    None => false,
                };
            if !ours {
                return Err(ShipError::Superseded {
                    location: store.location().to_owned(),
                    shipped: at,
                    found: name,
                });
            }
            at = range.last;
        }
        Ok(if at == shipped { at } else { self.advance(at) })
    }

    /// Stores a segment; one already there under its name must hold this journal's
    /// records (read back only then, so no copy of each segment is kept for the compare).
    async fn put_segment(&self, name: &str, bytes: Vec<u8>) -> Result<(), ShipError> {
        let store = &self.shipping.store;
        self.shipping.fence()?;
        match store.put_new(name, bytes).await? {
            Stored::Created => Ok(()),
            Stored::AlreadyThere => match store.get(name).await? {
                Some(there) if self.holds_ours(&there)? => Ok(()),
                _ => Err(ShipError::Superseded {
                    location: store.location().to_owned(),
                    shipped: self.shipping.shipped(),
                    found: name.to_owned(),
                }),
            },
        }
    }

    /// Whether stored segment bytes hold this journal's records.
    fn holds_ours(&self, bytes: &[u8]) -> Result<bool, ShipError> {
        match decode_segment(bytes) {
            Ok(segment) => Ok(self.ctx.journal.agrees_with(&segment)?),
            Err(_) => Ok(false),
        }
    }

    /// Stores the newest local snapshot the shipped records reach, if not stored yet.
    async fn ship_snapshot(&mut self, shipped: u64) -> Result<(), ShipError> {
        let journal = &self.ctx.journal;
        let Some(seq) = journal
            .snapshot_seqs()?
            .into_iter()
            .filter(|s| *s <= shipped)
            .max()
        else {
            return Ok(());
        };
        if seq <= self.snapshot_shipped {
            return Ok(());
        }
        if let Some(frame) = journal.snapshot_frame(seq)? {
            // A snapshot already stored at that seq holds the same state: either will do.
            self.shipping.fence()?;
            self.shipping
                .store
                .put_new(&snapshot_name(seq), frame)
                .await?;
            self.snapshot_shipped = seq;
            self.status.snapshots += 1;
        }
        Ok(())
    }

    /// Sets `karpenter_journal_upload_lag_seconds`: how long ago the oldest record not yet
    /// shipped was recorded (0 when everything is).
    fn update_lag(&self) -> Result<(), ShipError> {
        let journal = &self.ctx.journal;
        let oldest = journal
            .read_raw_from(self.shipping.shipped().saturating_add(1))
            .next()
            .transpose()?;
        let lag_ms = oldest.map_or(0, |r| journal.now_ms().saturating_sub(r.recorded_at_ms));
        self.ctx
            .metrics
            .journal_upload_lag(lag_ms.max(0) as f64 / 1000.0);
        Ok(())
    }
}

fn error_label(error: &ShipError) -> &'static str {
    match error {
        ShipError::Store(e) => e.metric_label(),
        ShipError::Journal(_) => "journal",
        ShipError::Superseded { .. } => "superseded",
        ShipError::NotLeading { .. } => "not_leading",
    }
}

/// The shipper actor.
pub struct ShipperActor;

impl Actor for ShipperActor {
    type Msg = ShipperMsg;
    type State = Shipper;
    type Arguments = (Context, Arc<Shipping>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (ctx, shipping): (Context, Arc<Shipping>),
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(shipping.every, || ShipperMsg::Ship);
        Ok(Shipper::new(ctx, shipping))
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ShipperMsg::Ship => {
                if let Err(error) = state.ship().await {
                    warn!(%error, "Journal shipping failed; the local journal keeps everything and the next pass tries again.");
                }
            }
            ShipperMsg::Flush(reply) => {
                let _ = reply.send(state.ship().await.map_err(|e| e.to_string()));
            }
            ShipperMsg::GetStatus(reply) => {
                let _ = reply.send(state.status().clone());
            }
        }
        Ok(())
    }
}
