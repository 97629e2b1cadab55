//! The controller's journal at start-up: opened and replayed, or, when it cannot be, the start
//! is refused with the reason — a damaged journal is never silently taken for an empty one.
//! `--discard-damaged-journal` moves it aside (kept for a post-mortem) and starts a new one.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use karpenter_core::events::{ClusterView, DomainEvent};
use karpenter_journal::{Journal, Until};
use tracing::warn;

/// The open journal and what it holds.
pub struct Opened {
    /// The journal.
    pub journal: Journal<DomainEvent>,
    /// Its replayed state.
    pub view: ClusterView,
    /// Where a damaged journal was moved, when it was.
    pub discarded: Option<PathBuf>,
}

fn open_and_replay(dir: &Path) -> anyhow::Result<(Journal<DomainEvent>, ClusterView)> {
    let journal = Journal::<DomainEvent>::open(dir)
        .with_context(|| format!("cannot open the journal in {}", dir.display()))?;
    let quarantined = &journal.recovery().quarantined;
    if !quarantined.is_empty() {
        warn!(
            journal = %dir.display(),
            records = quarantined.len(),
            "The journal's damaged tail was moved to quarantine (an interrupted write); the rest replays."
        );
    }
    let view = journal
        .replay::<ClusterView>(Until::End)
        .with_context(|| format!("cannot replay the journal in {}", dir.display()))?
        .state;
    Ok((journal, view))
}

/// Moves the journal in `dir` to `<dir>.<why>-<unix seconds>`, kept for a post-mortem.
pub(super) fn move_aside(dir: &Path, why: &str) -> anyhow::Result<PathBuf> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut aside = dir.as_os_str().to_owned();
    aside.push(format!(".{why}-{seconds}"));
    let aside = PathBuf::from(aside);
    std::fs::rename(dir, &aside).with_context(|| {
        format!(
            "cannot move the journal {} aside to {}",
            dir.display(),
            aside.display()
        )
    })?;
    Ok(aside)
}

/// Opens and replays the journal in `dir`. One that cannot be opened or replayed is an error
/// naming the fix, unless `discard_damaged`, which moves it to `<dir>.damaged-<unix seconds>`
/// and starts a new one there.
pub fn open(dir: &Path, discard_damaged: bool) -> anyhow::Result<Opened> {
    let error = match open_and_replay(dir) {
        Ok((journal, view)) => {
            return Ok(Opened {
                journal,
                view,
                discarded: None,
            });
        }
        Err(error) => error,
    };
    if !discard_damaged {
        return Err(error.context(
            "the journal is damaged or from a newer karpenter: inspect it with `karpenter journal verify`, or start with --discard-damaged-journal (DISCARD_DAMAGED_JOURNAL=true) to move it aside and begin a new one (NodeClaims are adopted from the cluster)",
        ));
    }
    let aside = move_aside(dir, "damaged")?;
    warn!(
        reason = format!("{error:#}"),
        moved_to = %aside.display(),
        "The journal could not be replayed; moved it aside and starting a new one."
    );
    let (journal, view) = open_and_replay(dir)?;
    Ok(Opened {
        journal,
        view,
        discarded: Some(aside),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use karpenter_journal::{EntityRef, JournalEvent};

    use super::*;

    /// An event as a newer karpenter would write it: a schema version this one cannot read.
    #[derive(Debug, Clone)]
    struct FromTheFuture;

    impl JournalEvent for FromTheFuture {
        const SCHEMA_VERSION: u16 = 99;
        fn event_type(&self) -> &str {
            "PodBound"
        }
        fn entity(&self) -> EntityRef {
            EntityRef::new("Pod", "u1".to_owned())
        }
        fn to_payload(&self) -> Result<Vec<u8>, serde_json::Error> {
            Ok(b"{}".to_vec())
        }
        fn from_payload(_: &str, _: u16, _: &[u8]) -> Result<Option<Self>, String> {
            Ok(Some(FromTheFuture))
        }
    }

    fn unreadable_journal() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("journal");
        {
            let journal: Journal<DomainEvent> = Journal::open(&dir).unwrap();
            journal
                .append(&DomainEvent::PodDeleted { uid: "u0".into() })
                .unwrap();
            journal.flush().unwrap();
        }
        let newer: Journal<FromTheFuture> = Journal::open(&dir).unwrap();
        newer.append(&FromTheFuture).unwrap();
        newer.flush().unwrap();
        drop(newer);
        (root, dir)
    }

    #[test]
    fn a_journal_that_does_not_replay_stops_the_start_and_names_the_fix() {
        let (_root, dir) = unreadable_journal();
        let error = format!("{:#}", open(&dir, false).err().unwrap());
        assert!(error.contains("--discard-damaged-journal"), "{error}");
        assert!(error.contains("unknown schema version 99"), "{error}");
        // Nothing was touched: it still fails the same way.
        assert!(open(&dir, false).is_err());
    }

    #[test]
    fn discarding_moves_the_damaged_journal_aside_and_starts_anew() {
        let (root, dir) = unreadable_journal();
        let opened = open(&dir, true).unwrap();
        let aside = opened.discarded.clone().unwrap();
        assert!(aside.starts_with(root.path()) && aside.is_dir());
        assert_eq!(opened.view, ClusterView::default());
        assert_eq!(opened.journal.last_seq().unwrap(), None);
        drop(opened);
        // The damaged one is kept as it was, for a post-mortem.
        let kept: Journal<DomainEvent> = Journal::open(&aside).unwrap();
        assert!(kept.replay::<ClusterView>(Until::End).is_err());
    }

    #[test]
    fn a_sound_journal_opens_with_its_state() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("journal");
        {
            let journal: Journal<DomainEvent> = Journal::open(&dir).unwrap();
            journal
                .append(&DomainEvent::PodPending {
                    uid: "u1".into(),
                    pod: "default/web".into(),
                    requests: Default::default(),
                })
                .unwrap();
            journal.flush().unwrap();
        }
        let opened = open(&dir, false).unwrap();
        assert!(opened.discarded.is_none());
        assert_eq!(opened.view.pending.len(), 1);
    }
}
