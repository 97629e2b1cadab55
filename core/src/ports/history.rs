//! The journal's history store: where the leader ships sealed journal segments and
//! snapshots, and where a new leader and the `journal` tools read them back. S3 implements
//! it in production (`karpenter_aws::history`); [`MemoryHistory`] serves the simulator and
//! tests.
//!
//! Names are relative to the history's prefix (one per cluster); what they mean is
//! `karpenter_journal::segment`'s business, not the store's. Objects are immutable: a store
//! never replaces one ([`HistoryStore::put_new`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::BoxFuture;

/// The object naming the cluster whose history a prefix holds, written before anything else.
pub const MARKER: &str = "history.json";

/// What [`HistoryStore::put_new`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The object was written.
    Created,
    /// An object of that name was there already and was left as it was (the caller reads it
    /// to tell a repeated upload from another writer's).
    AlreadyThere,
}

/// Failures of the history store, typed where what happens next depends on them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The bucket does not exist.
    #[error(
        "journal bucket {bucket} does not exist: create it (see docs/journal-bucket.md) or fix --journal-bucket"
    )]
    NoSuchBucket {
        /// The bucket.
        bucket: String,
    },
    /// The credentials may not do this.
    #[error(
        "no permission to {action} in {location}: grant the controller's role s3:{action} on it (deploy/cloudformation) ({message})"
    )]
    AccessDenied {
        /// The S3 action refused (`PutObject`, `GetObject`, `ListBucket`).
        action: String,
        /// The history's location.
        location: String,
        /// What the store said.
        message: String,
    },
    /// The store asks to slow down; retried later.
    #[error("{location} is throttling requests; retrying later")]
    Throttled {
        /// The history's location.
        location: String,
    },
    /// The store could not be reached or failed; retried later.
    #[error("{location} is unavailable: {message}")]
    Unavailable {
        /// The history's location.
        location: String,
        /// What went wrong.
        message: String,
    },
    /// The store returned an object that is not what was stored (a content checksum
    /// failed).
    #[error("{location}/{name} failed its content check: {message}")]
    Corrupt {
        /// The history's location.
        location: String,
        /// The object.
        name: String,
        /// What did not match.
        message: String,
    },
}

impl HistoryError {
    /// Whether trying again later may succeed (throttling, an outage) rather than needing a
    /// person (a missing bucket, a missing permission, damaged data).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HistoryError::Throttled { .. } | HistoryError::Unavailable { .. }
        )
    }

    /// Label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HistoryError::NoSuchBucket { .. } => "no_such_bucket",
            HistoryError::AccessDenied { .. } => "access_denied",
            HistoryError::Throttled { .. } => "throttled",
            HistoryError::Unavailable { .. } => "unavailable",
            HistoryError::Corrupt { .. } => "corrupt",
        }
    }
}

/// An object store holding one cluster's journal history.
pub trait HistoryStore: Send + Sync + 'static {
    /// Where the history lives, as a user names it (`s3://bucket/prefix`).
    fn location(&self) -> &str;

    /// The names (relative to the history's prefix) of the objects whose name starts with
    /// `prefix` and sorts after `start_after` (all of them without it), in order.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, HistoryError>>;

    /// An object's bytes, checked against the checksum stored with it; `None` if absent.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, HistoryError>>;

    /// Writes `bytes` under `name` unless an object of that name exists, sending a checksum
    /// the store verifies before keeping the object: an object is never replaced, and never
    /// kept partly written.
    fn put_new<'a>(
        &'a self,
        name: &'a str,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<Stored, HistoryError>>;
}

/// A history store in memory, shareable between the simulator's "pods" (clones share the
/// objects). Faults can be injected for tests: [`MemoryHistory::fail_next`].
#[derive(Debug, Clone, Default)]
pub struct MemoryHistory {
    location: String,
    inner: Arc<Mutex<MemoryInner>>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    objects: BTreeMap<String, Vec<u8>>,
    failures: Vec<HistoryError>,
}

impl MemoryHistory {
    /// An empty store named `location`.
    pub fn new(location: impl Into<String>) -> Self {
        MemoryHistory {
            location: location.into(),
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next calls fail with these errors, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = HistoryError>) {
        self.lock().failures.extend(errors);
    }

    /// Every object, by name (for checks).
    pub fn objects(&self) -> BTreeMap<String, Vec<u8>> {
        self.lock().objects.clone()
    }

    /// Removes an object, as a bucket's lifecycle rule or a person would.
    pub fn delete(&self, name: &str) -> bool {
        self.lock().objects.remove(name).is_some()
    }

    fn injected(&self) -> Result<(), HistoryError> {
        let mut inner = self.lock();
        if inner.failures.is_empty() {
            Ok(())
        } else {
            Err(inner.failures.remove(0))
        }
    }
}

impl HistoryStore for MemoryHistory {
    fn location(&self) -> &str {
        &self.location
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, HistoryError>> {
        Box::pin(async move {
            self.injected()?;
            Ok(self
                .lock()
                .objects
                .keys()
                .filter(|name| name.starts_with(prefix))
                .filter(|name| start_after.is_none_or(|after| name.as_str() > after))
                .cloned()
                .collect())
        })
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, HistoryError>> {
        Box::pin(async move {
            self.injected()?;
            Ok(self.lock().objects.get(name).cloned())
        })
    }

    fn put_new<'a>(
        &'a self,
        name: &'a str,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<Stored, HistoryError>> {
        Box::pin(async move {
            self.injected()?;
            let mut inner = self.lock();
            if inner.objects.contains_key(name) {
                return Ok(Stored::AlreadyThere);
            }
            inner.objects.insert(name.to_owned(), bytes);
            Ok(Stored::Created)
        })
    }
}
