//! Opening a journal for the `journal` subcommands, `simulate --report` and `journal whatif`,
//! below all of them.

use std::path::Path;

use anyhow::{Context as _, bail};
use karpenter_core::events::DomainEvent;
use karpenter_journal::Journal;

/// Whether `dir` holds a journal (sled's files).
pub fn is_journal_dir(dir: &Path) -> bool {
    dir.join("conf").is_file() && dir.join("db").is_file()
}

/// Opens the journal in `dir`, saying so when it recovered from a damaged tail.
pub fn open(dir: &Path) -> anyhow::Result<Journal<DomainEvent>> {
    if !dir.join("db").is_file() {
        bail!(
            "{} holds no journal (run `karpenter simulate` or pass the journal directory)",
            dir.display()
        );
    }
    let journal = Journal::open(dir).with_context(|| {
        format!(
            "cannot open the journal in {} (is a simulation or controller still writing it?)",
            dir.display()
        )
    })?;
    let recovery = journal.recovery();
    if !recovery.quarantined.is_empty() {
        eprintln!(
            "note: the journal's last record(s) {:?} were damaged (an interrupted write) and were set aside; state is as of seq {}",
            recovery.quarantined, recovery.last_good_seq
        );
    }
    Ok(journal)
}

/// A directory for a run's journal: `keep` (a journal already there is replaced; anything
/// else there is refused, naming `flag`), or a temporary one, deleted with the guard.
pub fn run_dir(
    keep: Option<&Path>,
    flag: &str,
) -> anyhow::Result<(std::path::PathBuf, Option<tempfile::TempDir>)> {
    match keep {
        Some(dir) => {
            if dir.exists() {
                if !is_journal_dir(dir) {
                    bail!(
                        "{flag} {}: exists and is not a journal; choose another directory",
                        dir.display()
                    );
                }
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
            Ok((dir.to_owned(), None))
        }
        None => {
            let temporary = tempfile::tempdir().context("cannot make a temporary directory")?;
            Ok((temporary.path().join("journal"), Some(temporary)))
        }
    }
}
