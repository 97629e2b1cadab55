//! The journal's history in the store (`--journal-bucket`) at start-up: before a new leader
//! replays its journal, it makes the journal continue the stored history.
//!
//! - The prefix's marker (`history.json`) must name this cluster: a history of another
//!   cluster is refused, naming the setting.
//! - The store's history is read from a listing ([`karpenter_journal::history`]) and the
//!   local journal is compared with it: level or ahead (the same pod restarted) goes on as
//!   it is; behind (a replica that led before) imports the segments after its end; empty (a
//!   new pod) or older than anything stored starts from the newest stored snapshot and the
//!   segments after it. A local journal whose records differ from the stored ones (written
//!   after its last upload by a leader that then lost the history to another) is moved to
//!   `<dir>.set-aside-<unix seconds>` and the stored history adopted.
//! - Anything adopted is journaled (`HistoryTakenOver`: who, where from, from which
//!   position, what), so `journal explain` tells the seam.
//! - A damaged stored object (its checksums fail) stops the start, naming the object: the
//!   history is never continued past a hole.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use karpenter_core::events::history::{SetAside, Takeover};
use karpenter_core::events::{ClusterView, DomainEvent};
use karpenter_core::ports::history::{HistoryStore, MARKER, Stored};
use karpenter_journal::history::{Listing, Remote, Standing, adopt, remote_history, standing};
use karpenter_journal::segment::{
    Segment, SegmentRange, decode_segment, segment_name, snapshot_name,
};
use karpenter_journal::{Journal, JournalError, Until};
use tracing::{info, warn};

use super::journal::Opened;

/// What the marker object says.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Marker {
    cluster: String,
}

/// Where the history goes and who this process is.
#[derive(Clone)]
pub struct HistoryStart {
    /// The store.
    pub store: Arc<dyn HistoryStore>,
    /// The cluster's name (`--cluster-name`).
    pub cluster: String,
    /// This process (its Lease identity).
    pub holder: String,
}

/// The journal, continuing the stored history.
pub struct Resumed {
    /// The journal and its replayed state.
    pub opened: Opened,
    /// The last sequence number the store holds (where shipping goes on from).
    pub shipped: u64,
    /// What was taken over, when anything was.
    pub takeover: Option<Takeover>,
}

/// Checks the prefix holds this cluster's history (writing the marker when it is new).
pub async fn check_marker(store: &dyn HistoryStore, cluster: &str) -> anyhow::Result<()> {
    let ours = serde_json::to_vec(&Marker {
        cluster: cluster.to_owned(),
    })?;
    let there = match store.put_new(MARKER, ours).await? {
        Stored::Created => return Ok(()),
        Stored::AlreadyThere => store.get(MARKER).await?,
    };
    let marker: Marker = there
        .as_deref()
        .map(serde_json::from_slice)
        .transpose()
        .with_context(|| {
            format!(
                "{}/{MARKER} is not a karpenter journal marker",
                store.location()
            )
        })?
        .ok_or_else(|| anyhow!("{}/{MARKER} vanished while being read", store.location()))?;
    if marker.cluster != cluster {
        bail!(
            "{} holds the journal of cluster {:?}, not {cluster:?}: give this cluster its own --journal-bucket prefix (JOURNAL_BUCKET), or fix --cluster-name",
            store.location(),
            marker.cluster
        );
    }
    Ok(())
}

/// The history the store holds, its listing checked.
pub async fn read_remote(store: &dyn HistoryStore) -> anyhow::Result<Option<Remote>> {
    let listing = Listing::parse(store.list("", None).await?);
    let stray: Vec<&String> = listing.other.iter().filter(|n| *n != MARKER).collect();
    if !stray.is_empty() {
        warn!(location = store.location(), objects = ?stray, "The journal's history prefix holds objects that are not karpenter's; leaving them alone.");
    }
    let remote = remote_history(&listing).with_context(|| {
        format!(
            "the journal's history in {} cannot be followed",
            store.location()
        )
    })?;
    if let Some(remote) = &remote
        && !remote.holes.is_empty()
    {
        warn!(
            location = store.location(),
            holes = ?remote.holes.iter().map(ToString::to_string).collect::<Vec<_>>(),
            readable_from = remote.readable_from,
            "Parts of the stored journal history are missing (deleted other than oldest first); it is readable from a later snapshot on."
        );
    }
    Ok(remote)
}

/// Reads and checks a stored segment.
pub async fn fetch(store: &dyn HistoryStore, range: SegmentRange) -> anyhow::Result<Segment> {
    let name = segment_name(range);
    let bytes = store
        .get(&name)
        .await?
        .ok_or_else(|| anyhow!("{}/{name} was listed but is gone", store.location()))?;
    decode_segment(&bytes).with_context(|| {
        format!(
            "{}/{name} is damaged; the history cannot be continued past it (delete it and every object after it to go on from the history before it)",
            store.location()
        )
    })
}

/// Opens the journal in `dir` continuing the history in `start.store` (see the module doc).
pub async fn open(
    dir: &Path,
    discard_damaged: bool,
    start: &HistoryStart,
) -> anyhow::Result<Resumed> {
    let store = start.store.as_ref();
    check_marker(store, &start.cluster).await?;
    let remote = read_remote(store).await?;
    let mut opened = super::journal::open(dir, discard_damaged)?;
    let journal = &opened.journal;
    let last = journal.last_seq()?.unwrap_or(0);
    let local_snapshot = journal.snapshot_seqs()?.last().copied();
    let mut plan = standing(remote.as_ref(), journal.first_seq()?, last, local_snapshot);
    if let (
        Standing::Ahead {
            check: Some(range), ..
        },
        Some(remote),
    ) = (&plan, &remote)
        && !journal.agrees_with(&fetch(store, *range).await?)?
    {
        plan = adopt(remote);
    }
    let (Some(remote), Standing::Behind { .. } | Standing::Adopt { .. }) = (&remote, &plan) else {
        let shipped = match plan {
            Standing::Fresh { after } | Standing::Ahead { after, .. } => after,
            Standing::Behind { .. } | Standing::Adopt { .. } => 0,
        };
        return Ok(Resumed {
            opened,
            shipped,
            takeover: None,
        });
    };
    let mut takeover = Takeover {
        holder: start.holder.clone(),
        location: store.location().to_owned(),
        through: remote.end,
        snapshot: None,
        imported: 0,
        segments: 0,
        set_aside: None,
    };
    if let Standing::Behind { chain } = &plan {
        match import(&opened.journal, store, chain, &mut takeover).await {
            Ok(()) => {}
            Err(error) if is_divergence(&error) => plan = adopt(remote),
            Err(error) => return Err(error),
        }
    }
    if let Standing::Adopt { snapshot, chain } = &plan {
        if opened.journal.last_seq()?.is_some() || !opened.journal.snapshot_seqs()?.is_empty() {
            let last = opened.journal.last_seq()?.unwrap_or(0);
            let path = set_aside(dir, opened)?;
            takeover.set_aside = Some(SetAside {
                path: path.display().to_string(),
                last,
            });
            opened = super::journal::open(dir, false)?;
        }
        takeover.snapshot = *snapshot;
        if let Some(seq) = snapshot {
            let name = snapshot_name(*seq);
            let frame = store
                .get(&name)
                .await?
                .ok_or_else(|| anyhow!("{}/{name} was listed but is gone", store.location()))?;
            opened
                .journal
                .import_snapshot(&frame)
                .with_context(|| format!("{}/{name} is damaged", store.location()))?;
        }
        import(&opened.journal, store, chain, &mut takeover).await?;
    }
    opened
        .journal
        .append(&DomainEvent::HistoryTakenOver(Box::new(takeover.clone())))?;
    opened.journal.flush()?;
    opened.view = opened
        .journal
        .replay::<ClusterView>(Until::End)
        .with_context(|| {
            format!(
                "cannot replay the history taken over from {}",
                store.location()
            )
        })?
        .state;
    info!(
        location = store.location(),
        through = takeover.through,
        snapshot = ?takeover.snapshot,
        imported = takeover.imported,
        set_aside = ?takeover.set_aside.as_ref().map(|s| &s.path),
        "Took the journal's history over from the store."
    );
    Ok(Resumed {
        opened,
        shipped: takeover.through,
        takeover: Some(takeover),
    })
}

async fn import(
    journal: &Journal<DomainEvent>,
    store: &dyn HistoryStore,
    chain: &[SegmentRange],
    takeover: &mut Takeover,
) -> anyhow::Result<()> {
    for range in chain {
        let segment = fetch(store, *range).await?;
        let imported = journal.import_segment(&segment)?;
        takeover.imported += imported.records;
        takeover.segments += 1;
    }
    Ok(())
}

/// A stored history read into a local journal (`journal … s3://…`).
pub struct Downloaded {
    /// The journal holding it: the oldest readable snapshot, then every record after it.
    pub journal: Journal<DomainEvent>,
    /// The cluster its marker names.
    pub cluster: String,
    /// What the store holds.
    pub remote: Remote,
}

/// Reads the whole readable history in `store` (from its oldest snapshot or its first
/// record on) into a new journal in `dir`, every object checked.
pub async fn download(store: &dyn HistoryStore, dir: &Path) -> anyhow::Result<Downloaded> {
    let Some(marker) = store.get(MARKER).await? else {
        let below: Vec<String> = store
            .list("", None)
            .await?
            .into_iter()
            .filter_map(|name| {
                let cluster = name.strip_suffix(&format!("/{MARKER}"))?;
                Some(format!("{}/{cluster}", store.location()))
            })
            .collect();
        if below.is_empty() {
            bail!(
                "{} holds no journal history (no {MARKER}): the controller keeps a cluster's history under s3://BUCKET/PREFIX/<cluster-name>",
                store.location()
            );
        }
        bail!(
            "{} holds no journal history itself, but these do: {}",
            store.location(),
            below.join(", ")
        );
    };
    let marker: Marker = serde_json::from_slice(&marker).with_context(|| {
        format!(
            "{}/{MARKER} is not a karpenter journal marker",
            store.location()
        )
    })?;
    let remote = read_remote(store).await?.ok_or_else(|| {
        anyhow!(
            "{} holds cluster {:?}'s marker but no segment yet (the leader ships its first one within --journal-ship-interval)",
            store.location(),
            marker.cluster
        )
    })?;
    let journal = Journal::open(dir)
        .with_context(|| format!("cannot make a journal in {}", dir.display()))?;
    if remote.readable_from > 0 {
        let name = snapshot_name(remote.readable_from);
        let frame = store
            .get(&name)
            .await?
            .ok_or_else(|| anyhow!("{}/{name} was listed but is gone", store.location()))?;
        journal
            .import_snapshot(&frame)
            .with_context(|| format!("{}/{name} is damaged", store.location()))?;
    }
    for range in &remote.chain {
        journal.import_segment(&fetch(store, *range).await?)?;
    }
    journal.flush()?;
    Ok(Downloaded {
        journal,
        cluster: marker.cluster,
        remote,
    })
}

fn is_divergence(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<JournalError>(),
        Some(JournalError::Import { .. })
    )
}

/// Moves the journal in `dir` to `<dir>.set-aside-<unix seconds>`, kept for a post-mortem.
fn set_aside(dir: &Path, opened: Opened) -> anyhow::Result<PathBuf> {
    drop(opened);
    let aside = super::journal::move_aside(dir, "set-aside")?;
    warn!(
        moved_to = %aside.display(),
        "The journal's records differ from the stored history (another leader went on from it); moved the journal aside and taking the stored history over."
    );
    Ok(aside)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use karpenter_core::ports::history::MemoryHistory;
    use karpenter_journal::segment::segment_name;

    use super::*;

    fn start(store: &MemoryHistory, cluster: &str, holder: &str) -> HistoryStart {
        HistoryStart {
            store: Arc::new(store.clone()),
            cluster: cluster.to_owned(),
            holder: holder.to_owned(),
        }
    }

    fn pending(uid: &str) -> DomainEvent {
        DomainEvent::PodPending {
            uid: uid.into(),
            pod: format!("default/{uid}"),
            requests: Default::default(),
        }
    }

    /// Ships `journal`'s records after `after` into `store` in segments, as the shipper
    /// does; returns the new position.
    async fn ship(journal: &Journal<DomainEvent>, store: &MemoryHistory, mut after: u64) -> u64 {
        while let Some(sealed) = journal.seal_segment(after, 300).unwrap() {
            let name = segment_name(sealed.header.range);
            store.put_new(&name, sealed.bytes).await.unwrap();
            after = sealed.header.range.last;
        }
        after
    }

    fn uids(opened: &Opened) -> Vec<String> {
        opened.view.pending.keys().cloned().collect()
    }

    #[tokio::test]
    async fn a_new_pod_takes_the_stored_history_over_and_records_it() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals/c1");
        let old_dir = root.path().join("old");
        let resumed = open(&old_dir, false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        assert!(resumed.takeover.is_none());
        assert_eq!(resumed.shipped, 0);
        for i in 0..12 {
            resumed
                .opened
                .journal
                .append(&pending(&format!("p{i}")))
                .unwrap();
        }
        let shipped = ship(&resumed.opened.journal, &store, 0).await;
        assert_eq!(shipped, 12);
        let old_view: Vec<String> = (resumed.opened.journal)
            .replay::<ClusterView>(Until::End)
            .unwrap()
            .state
            .pending
            .into_keys()
            .collect();
        drop(resumed);

        // The old pod's disk is gone; a new pod starts with an empty directory.
        std::fs::remove_dir_all(&old_dir).unwrap();
        let new_dir = root.path().join("new");
        let resumed = open(&new_dir, false, &start(&store, "c1", "pod-b"))
            .await
            .unwrap();
        let takeover = resumed.takeover.clone().unwrap();
        assert_eq!(takeover.holder, "pod-b");
        assert_eq!((takeover.through, takeover.imported), (12, 12));
        assert!(takeover.set_aside.is_none());
        assert_eq!(resumed.shipped, 12);
        assert_eq!(uids(&resumed.opened), old_view);
        // The takeover is the next record, and it is shipped like any other.
        let last = resumed
            .opened
            .journal
            .read_from(13)
            .next()
            .unwrap()
            .unwrap();
        assert!(matches!(last.event, DomainEvent::HistoryTakenOver(_)));
        assert_eq!(ship(&resumed.opened.journal, &store, 12).await, 13);
    }

    #[tokio::test]
    async fn a_journal_that_went_its_own_way_is_set_aside() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals/c1");
        let a_dir = root.path().join("a");
        let a = open(&a_dir, false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        for i in 0..5 {
            a.opened.journal.append(&pending(&format!("a{i}"))).unwrap();
        }
        ship(&a.opened.journal, &store, 0).await;
        // A writes more but never ships it; B takes over and goes on.
        a.opened.journal.append(&pending("lost")).unwrap();
        a.opened.journal.flush().unwrap();
        drop(a);
        let b_dir = root.path().join("b");
        let b = open(&b_dir, false, &start(&store, "c1", "pod-b"))
            .await
            .unwrap();
        b.opened.journal.append(&pending("b0")).unwrap();
        b.opened.journal.append(&pending("b1")).unwrap();
        ship(&b.opened.journal, &store, 5).await;
        drop(b);
        // A leads again with its own sixth record: it is not part of the history.
        let a = open(&a_dir, false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        let takeover = a.takeover.clone().unwrap();
        let aside = takeover.set_aside.clone().unwrap();
        assert_eq!(aside.last, 6);
        assert!(Path::new(&aside.path).is_dir());
        assert_eq!(a.shipped, 8);
        let mut pending = uids(&a.opened);
        pending.sort();
        assert_eq!(pending, ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]);
    }

    #[tokio::test]
    async fn another_clusters_history_is_refused_naming_the_setting() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals/shared");
        open(&root.path().join("x"), false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        let error = open(&root.path().join("y"), false, &start(&store, "c2", "pod-b"))
            .await
            .err()
            .unwrap();
        let error = format!("{error:#}");
        assert!(
            error.contains("\"c1\"") && error.contains("--journal-bucket"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_damaged_stored_segment_stops_the_start_naming_it() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals/c1");
        let dir = root.path().join("a");
        let a = open(&dir, false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        for i in 0..3 {
            a.opened.journal.append(&pending(&format!("a{i}"))).unwrap();
        }
        ship(&a.opened.journal, &store, 0).await;
        drop(a);
        let (name, mut bytes) = store
            .objects()
            .into_iter()
            .find(|(n, _)| n.starts_with("segments/"))
            .unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        store.delete(&name);
        store.put_new(&name, bytes).await.unwrap();
        let error = open(&root.path().join("b"), false, &start(&store, "c1", "pod-b"))
            .await
            .err()
            .unwrap();
        let error = format!("{error:#}");
        assert!(
            error.contains(&name) && error.contains("damaged"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_whole_history_across_a_takeover_reads_as_one_journal() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals/c1");
        let a = open(&root.path().join("a"), false, &start(&store, "c1", "pod-a"))
            .await
            .unwrap();
        for i in 0..5 {
            a.opened.journal.append(&pending(&format!("a{i}"))).unwrap();
        }
        ship(&a.opened.journal, &store, 0).await;
        drop(a);
        let b = open(&root.path().join("b"), false, &start(&store, "c1", "pod-b"))
            .await
            .unwrap();
        for i in 0..2 {
            b.opened.journal.append(&pending(&format!("b{i}"))).unwrap();
        }
        ship(&b.opened.journal, &store, 5).await;
        let written: Vec<_> = b
            .opened
            .journal
            .read_raw_from(0)
            .map(|r| r.unwrap())
            .collect();
        drop(b);

        let downloaded = download(&store, &root.path().join("read")).await.unwrap();
        assert_eq!(downloaded.cluster, "c1");
        assert_eq!(downloaded.remote.end, 8);
        let read: Vec<_> = downloaded
            .journal
            .read_raw_from(0)
            .map(|r| r.unwrap())
            .collect();
        // Every record once, with its own seq and time: the concatenation.
        assert_eq!(read, written);
        assert_eq!(
            read.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (1..=8).collect::<Vec<_>>()
        );
        assert_eq!(read[5].event_type, "HistoryTakenOver");
    }

    #[tokio::test]
    async fn reading_a_prefix_without_a_history_names_the_ones_below_it() {
        let root = tempfile::tempdir().unwrap();
        let store = MemoryHistory::new("memory://journals");
        let error = download(&store, &root.path().join("x"))
            .await
            .err()
            .unwrap();
        assert!(
            format!("{error:#}").contains("no journal history"),
            "{error:#}"
        );
        store
            .put_new("c1/history.json", b"{\"cluster\":\"c1\"}".to_vec())
            .await
            .unwrap();
        let error = download(&store, &root.path().join("y"))
            .await
            .err()
            .unwrap();
        assert!(
            format!("{error:#}").contains("memory://journals/c1"),
            "{error:#}"
        );
        // A marker and nothing shipped yet.
        let store = MemoryHistory::new("memory://journals/c2");
        check_marker(&store, "c2").await.unwrap();
        let error = download(&store, &root.path().join("z"))
            .await
            .err()
            .unwrap();
        assert!(format!("{error:#}").contains("no segment yet"), "{error:#}");
    }
}
