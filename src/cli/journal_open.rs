//! Opening a journal for the `journal` subcommands, `simulate --report` and `journal whatif`,
//! below all of them.

use std::ops::Deref;
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use karpenter_core::events::DomainEvent;
use karpenter_journal::Journal;

/// An opened journal: a directory's, or a stored history read into a temporary one.
pub struct OpenJournal {
    journal: Journal<DomainEvent>,
    /// The cluster a stored history is of.
    pub cluster: Option<String>,
    /// The temporary directory a stored history was read into, removed with this.
    _download: Option<tempfile::TempDir>,
}

impl Deref for OpenJournal {
    type Target = Journal<DomainEvent>;

    fn deref(&self) -> &Journal<DomainEvent> {
        &self.journal
    }
}

/// Whether `dir` names a stored history (`s3://BUCKET/PREFIX/CLUSTER`) rather than a
/// directory.
pub fn stored_history(dir: &Path) -> Option<&str> {
    dir.to_str().filter(|s| s.starts_with("s3://"))
}

/// Opens the journal in `dir`, saying so when it recovered from a damaged tail; or, for
/// `s3://BUCKET/PREFIX/CLUSTER`, reads the whole history stored there (the controller's
/// `--journal-bucket`) into a temporary journal.
pub fn open(dir: &Path) -> anyhow::Result<OpenJournal> {
    if let Some(spec) = stored_history(dir) {
        return download(spec);
    }
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
    Ok(OpenJournal {
        journal,
        cluster: None,
        _download: None,
    })
}

/// Reads the history at `spec` into a temporary journal. S3 is reached as the AWS SDK
/// does (`AWS_REGION`, the credential chain); `AWS_ENDPOINT_URL` names an emulator.
fn download(spec: &str) -> anyhow::Result<OpenJournal> {
    let location = karpenter_aws::history::HistoryLocation::parse(spec).map_err(|e| anyhow!(e))?;
    let region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "us-west-2".into());
    let endpoint = std::env::var("AWS_ENDPOINT_URL")
        .ok()
        .filter(|v| !v.is_empty());
    let connection = super::aws::connection_with(&region, endpoint.as_deref(), "AWS_ENDPOINT_URL")?;
    let temporary = tempfile::tempdir().context("cannot make a temporary directory")?;
    let dir = temporary.path().join("journal");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let downloaded = runtime.block_on(async {
        let store = karpenter_aws::history::S3History::connect(&connection, location).await;
        karpenter_rs::kube::history::download(&store, &dir).await
    })?;
    let remote = &downloaded.remote;
    eprintln!(
        "note: read {spec} (cluster {:?}): {} segment(s) through seq {}{}",
        downloaded.cluster,
        remote.chain.len(),
        remote.end,
        if remote.readable_from > 0 {
            format!(
                ", from its snapshot at seq {} (older history was removed)",
                remote.readable_from
            )
        } else {
            String::new()
        }
    );
    Ok(OpenJournal {
        journal: downloaded.journal,
        cluster: Some(downloaded.cluster),
        _download: Some(temporary),
    })
}
