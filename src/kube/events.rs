//! The Event publisher: Events go through the [`Correlator`] (client-go's aggregation,
//! counting and per-object rate limit) when they are recorded, and what it lets through is
//! queued for a task that writes `events.k8s.io/v1` Events: a new Event is created, one seen
//! again gets its `series` count patched (created anew if it was lost). Recording never
//! waits: a full queue drops the Event. What was dropped — by the rate limit, a full queue
//! or a write refused — is counted and said in one summary WARN per [`SUMMARY_EVERY`], never
//! a line per Event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::correlator::{Candidate, Correlator, Decision, Options, Write};

/// Events waiting to be written; beyond this, new ones are dropped (and counted).
const QUEUE: usize = 1024;

/// How often a summary of dropped Events is logged, when there is one.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// How often a write that failed for a reason that may pass (no answer, 429, 5xx) is tried.
const TRIES: u32 = 3;

/// Why Events were dropped since the last summary.
#[derive(Default)]
struct Dropped {
    rate_limited: AtomicU64,
    queue_full: AtomicU64,
    refused: AtomicU64,
}

impl Dropped {
    /// Takes the counts, leaving zeros.
    fn take(&self) -> [u64; 3] {
        [
            self.rate_limited.swap(0, Ordering::Relaxed),
            self.queue_full.swap(0, Ordering::Relaxed),
            self.refused.swap(0, Ordering::Relaxed),
        ]
    }
}

/// One write the task carries out.
struct Job {
    regarding: ObjectReference,
    type_: &'static str,
    reason: String,
    write: Write,
}

/// Records Events as client-go's recorder does; cheap to call from any thread.
pub struct Publisher {
    queue: mpsc::Sender<Job>,
    correlator: Arc<Mutex<Correlator>>,
    dropped: Arc<Dropped>,
}

impl Publisher {
    /// A publisher writing through `client` as `reporter`, its task started on the current
    /// runtime (it ends when the publisher is dropped).
    pub fn start(client: Client, reporter: Reporter) -> Self {
        Self::start_with(client, reporter, Options::default())
    }

    /// As [`Publisher::start`], with the correlator's bounds given.
    pub fn start_with(client: Client, reporter: Reporter, options: Options) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        let correlator = Arc::new(Mutex::new(Correlator::new(options)));
        let dropped = Arc::new(Dropped::default());
        let writer = Writer {
            client,
            reporter,
            correlator: correlator.clone(),
            dropped: dropped.clone(),
        };
        tokio::spawn(writer.run(jobs));
        Publisher {
            queue,
            correlator,
            dropped,
        }
    }

    /// Records an Event about `regarding` (a `Warning` when `warning`).
    pub fn record(&self, regarding: ObjectReference, warning: bool, reason: &str, note: &str) {
        let type_ = if warning { "Warning" } else { "Normal" };
        let object = format!(
            "{}/{}/{}/{}/{}",
            regarding.api_version.as_deref().unwrap_or_default(),
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.namespace.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default(),
            regarding.uid.as_deref().unwrap_or_default(),
        );
        let note: String = note.chars().take(1024).collect();
        let candidate = Candidate {
            object: &object,
            name: regarding.name.as_deref().unwrap_or("karpenter"),
            type_,
            reason,
            note: &note,
        };
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let decision = match self.correlator.lock() {
            Ok(mut correlator) => correlator.correlate(candidate, now_ms),
            Err(poisoned) => poisoned.into_inner().correlate(candidate, now_ms),
        };
        let Decision::Write(write) = decision else {
            self.dropped.rate_limited.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let job = Job {
            regarding,
            type_,
            reason: reason.to_owned(),
            write,
        };
        if self.queue.try_send(job).is_err() {
            self.dropped.queue_full.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The task that writes Events.
struct Writer {
    client: Client,
    reporter: Reporter,
    correlator: Arc<Mutex<Correlator>>,
    dropped: Arc<Dropped>,
}

impl Writer {
    async fn run(self, mut jobs: mpsc::Receiver<Job>) {
        let mut summary =
            tokio::time::interval_at(tokio::time::Instant::now() + SUMMARY_EVERY, SUMMARY_EVERY);
        summary.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                job = jobs.recv() => match job {
                    Some(job) => self.write(job).await,
                    None => break,
                },
                _ = summary.tick() => self.summarize(),
            }
        }
        self.summarize();
    }

    /// One WARN line for what was dropped since the last.
    fn summarize(&self) {
        let [rate_limited, queue_full, refused] = self.dropped.take();
        if rate_limited + queue_full + refused > 0 {
            warn!(
                dropped = rate_limited + queue_full + refused,
                rate_limited,
                queue_full,
                refused,
                every = ?SUMMARY_EVERY,
                "Events dropped: an object's rate (25, then one per 5 minutes), a full queue or a refused write."
            );
        }
    }

    async fn write(&self, job: Job) {
        let mut tries = 0;
        loop {
            tries += 1;
            let error = match self.attempt(&job).await {
                Ok(()) => return,
                Err(error) => error,
            };
            if tries >= TRIES || !transient(&error) {
                debug!(%error, reason = %job.reason, "Writing an Event failed.");
                self.dropped.refused.fetch_add(1, Ordering::Relaxed);
                let name = match &job.write {
                    Write::Create { name, .. } | Write::Repeat { name, .. } => name,
                };
                if let Ok(mut correlator) = self.correlator.lock() {
                    correlator.forget(name);
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(500 * u64::from(tries))).await;
        }
    }

    async fn attempt(&self, job: &Job) -> Result<(), kube::Error> {
        let events: Api<Event> =
            Api::namespaced(self.client.clone(), &events_namespace(&job.regarding));
        let now = MicroTime(jiff::Timestamp::now());
        match &job.write {
            Write::Create { name, note } => self.create(&events, job, name, note, None, now).await,
            Write::Repeat { name, note, count } => {
                let series = json!({"series": {"count": count, "lastObservedTime": now}});
                let patched = events
                    .patch(name, &PatchParams::default(), &Patch::Merge(&series))
                    .await;
                match patched {
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        let series = EventSeries {
                            count: i32::try_from(*count).unwrap_or(i32::MAX),
                            last_observed_time: now.clone(),
                        };
                        self.create(&events, job, name, note, Some(series), now)
                            .await
                    }
                    other => other.map(drop),
                }
            }
        }
    }

    async fn create(
        &self,
        events: &Api<Event>,
        job: &Job,
        name: &str,
        note: &str,
        series: Option<EventSeries>,
        now: MicroTime,
    ) -> Result<(), kube::Error> {
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(events_namespace(&job.regarding)),
                ..Default::default()
            },
            action: Some(job.reason.clone()),
            reason: Some(job.reason.clone()),
            note: Some(note.to_owned()),
            event_time: Some(now),
            regarding: Some(job.regarding.clone()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                (self.reporter.instance.clone())
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            series,
            type_: Some(job.type_.to_owned()),
            ..Default::default()
        };
        match events.create(&PostParams::default(), &event).await {
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
            other => other.map(drop),
        }
    }
}

/// Where an Event about `regarding` lives: its namespace, or `default` for cluster-scoped
/// objects (as client-go puts them).
fn events_namespace(regarding: &ObjectReference) -> String {
    regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned())
}

/// Whether a failed write may succeed if tried again.
fn transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}
