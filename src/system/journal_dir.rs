//! Where a run writes its journal, checked in two steps so that no flag is refused after
//! the disk was touched: [`RunJournal::check`] only looks (a directory that holds something
//! other than a journal is refused, naming the flag), and [`RunJournal::prepare`], called
//! once every other flag, setting and manifest has been accepted, replaces a journal already
//! there or makes a temporary directory.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// Whether `dir` holds a journal (sled's files).
pub fn is_journal_dir(dir: &Path) -> bool {
    dir.join("conf").is_file() && dir.join("db").is_file()
}

/// What a run does with its journal directory once it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A journal already there is replaced (the run starts its own).
    Replace,
    /// The journal there is continued (`simulate --resume`).
    Resume,
}

/// A run's journal directory, checked but not yet touched.
#[derive(Debug)]
#[must_use = "a checked journal directory is only used once prepared"]
pub struct RunJournal {
    /// `None`: a temporary directory, made by `prepare`.
    dir: Option<PathBuf>,
    flag: &'static str,
    start: Start,
}

impl RunJournal {
    /// Checks `dir`, given by `flag`, without touching it: a directory that exists and is
    /// not a journal is refused, and so is resuming where there is no journal.
    pub fn check(dir: &Path, flag: &'static str, start: Start) -> anyhow::Result<RunJournal> {
        match start {
            Start::Resume if !is_journal_dir(dir) => bail!(
                "--resume: {} holds no journal to resume; run without --resume to start one",
                dir.display()
            ),
            Start::Replace if dir.exists() && !is_journal_dir(dir) => bail!(
                "{flag} {}: exists and is not a journal; choose another directory",
                dir.display()
            ),
            _ => {}
        }
        Ok(RunJournal {
            dir: Some(dir.to_owned()),
            flag,
            start,
        })
    }

    /// `dir` when given (checked as [`RunJournal::check`] does), else a temporary
    /// directory.
    pub fn check_or_temporary(
        dir: Option<&Path>,
        flag: &'static str,
    ) -> anyhow::Result<RunJournal> {
        match dir {
            Some(dir) => RunJournal::check(dir, flag, Start::Replace),
            None => Ok(RunJournal {
                dir: None,
                flag,
                start: Start::Replace,
            }),
        }
    }

    /// The directory, when one was given.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Refuses `other` naming the same directory: two runs would write one journal.
    pub fn distinct_from(&self, other: &RunJournal) -> anyhow::Result<()> {
        match &other.dir {
            Some(dir) => self.not_in(dir, other.flag),
            None => Ok(()),
        }
    }

    /// Refuses naming `dir`, which `what` names (a journal the run reads, another run's):
    /// replacing it would destroy it.
    pub fn not_in(&self, dir: &Path, what: &str) -> anyhow::Result<()> {
        if let Some(mine) = &self.dir
            && same_path(mine, dir)
        {
            bail!(
                "{} and {what} both name {}: give this run a journal directory of its own",
                self.flag,
                mine.display()
            );
        }
        Ok(())
    }

    /// Makes the directory ready for the run: a journal already there is replaced (saying
    /// so on stderr) unless resumed; without a directory, a temporary one is made, removed
    /// with the returned guard.
    pub fn prepare(self) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
        let Some(dir) = self.dir else {
            let temporary = tempfile::tempdir().context("cannot make a temporary directory")?;
            return Ok((temporary.path().join("journal"), Some(temporary)));
        };
        if self.start == Start::Replace && dir.exists() {
            // Checked again: the directory may have changed since the check.
            if !is_journal_dir(&dir) {
                bail!(
                    "{} {}: exists and is not a journal; choose another directory",
                    self.flag,
                    dir.display()
                );
            }
            eprintln!("replacing the previous journal in {}", dir.display());
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot remove {}", dir.display()))?;
        }
        Ok((dir, None))
    }
}

/// Whether two paths name one directory (compared as given when either does not exist yet).
fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fake_journal(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("conf"), "x").unwrap();
        std::fs::write(dir.join("db"), "x").unwrap();
    }

    #[test]
    fn checking_touches_nothing_and_refuses_what_is_not_a_journal() {
        let root = tempfile::tempdir().unwrap();
        let journal = root.path().join("j");
        fake_journal(&journal);
        let checked = RunJournal::check(&journal, "--journal", Start::Replace).unwrap();
        assert!(is_journal_dir(&journal), "a check removed the journal");
        drop(checked);
        assert!(is_journal_dir(&journal));

        let other = root.path().join("notes");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("keep.txt"), "mine").unwrap();
        let err = RunJournal::check(&other, "--keep-journal", Start::Replace).unwrap_err();
        assert!(err.to_string().contains("--keep-journal"), "{err}");
        assert!(other.join("keep.txt").is_file());

        let err =
            RunJournal::check(&root.path().join("none"), "--journal", Start::Resume).unwrap_err();
        assert!(err.to_string().contains("--resume"), "{err}");
    }

    #[test]
    fn preparing_replaces_a_journal_unless_resumed() {
        let root = tempfile::tempdir().unwrap();
        let journal = root.path().join("j");
        fake_journal(&journal);
        let (dir, _) = RunJournal::check(&journal, "--journal", Start::Resume)
            .unwrap()
            .prepare()
            .unwrap();
        assert_eq!(dir, journal);
        assert!(is_journal_dir(&journal));
        RunJournal::check(&journal, "--journal", Start::Replace)
            .unwrap()
            .prepare()
            .unwrap();
        assert!(!journal.exists());
        let (dir, temporary) = RunJournal::check_or_temporary(None, "--cas-journal")
            .unwrap()
            .prepare()
            .unwrap();
        assert!(dir.starts_with(temporary.unwrap().path()));
    }

    #[test]
    fn two_runs_may_not_share_a_directory() {
        let root = tempfile::tempdir().unwrap();
        let a = RunJournal::check(&root.path().join("j"), "--journal", Start::Replace).unwrap();
        let b = RunJournal::check(&root.path().join("j"), "--cas-journal", Start::Replace).unwrap();
        let err = a.distinct_from(&b).unwrap_err().to_string();
        assert!(err.contains("--journal and --cas-journal"), "{err}");
        let err = b
            .not_in(&root.path().join("j"), "the recorded journal")
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--cas-journal and the recorded journal"),
            "{err}"
        );
        let c = RunJournal::check_or_temporary(None, "--cas-journal").unwrap();
        a.distinct_from(&c).unwrap();
    }
}
