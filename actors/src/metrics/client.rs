//! The Kubernetes client's series, under client-go's names (upstream Karpenter exports
//! them from its client): `rest_client_requests_total{code,host,method}` per attempt (`code`
//! is `<error>` when no answer came), `rest_client_request_retries_total{code,host,verb}`,
//! `rest_client_rate_limiter_duration_seconds{host,verb}` (how long a request waited for the
//! `--kube-client-qps` token bucket); and karpenter-rs's own
//! `karpenter_kube_watch_restarts_total{kind,reason}` (a watch that ended and relisted:
//! `gone` after `410 Gone`, `error` after a dropped connection or a refused request).
//!
//! As client-go's, they are process-wide: one client serves the whole controller, so every
//! [`super::Metrics`] registers the same series.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Labels, labels, register};

/// The client's series.
pub struct ClientMetrics {
    requests: Family<Labels, Counter>,
    retries: Family<Labels, Counter>,
    rate_limiter: Family<Labels, Histogram>,
    watch_restarts: Family<Labels, Counter>,
    /// The sums reports read back.
    tallies: std::sync::Mutex<Tallies>,
}

type Tallies = std::collections::BTreeMap<(&'static str, String), u64>;

static CLIENT: LazyLock<ClientMetrics> = LazyLock::new(|| ClientMetrics {
    requests: Family::default(),
    retries: Family::default(),
    rate_limiter: Family::new_with_constructor(|| {
        Histogram::new(exponential_buckets(0.001, 2.0, 16))
    }),
    watch_restarts: Family::default(),
    tallies: std::sync::Mutex::default(),
});

/// The process's client series.
pub fn client() -> &'static ClientMetrics {
    &CLIENT
}

impl ClientMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            self.requests.clone(),
        );
        register(
            registry,
            "rest_client_request_retries",
            "Number of request retries, partitioned by status code, verb, and host.",
            self.retries.clone(),
        );
        register(
            registry,
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            self.rate_limiter.clone(),
        );
        register(
            registry,
            "karpenter_kube_watch_restarts",
            "Watches that ended and started again, by kind and reason (gone: relisted after 410 Gone; error: a dropped connection or a refused request).",
            self.watch_restarts.clone(),
        );
    }

    /// An attempt was answered with `code` (`None`: no answer).
    pub fn request(&self, host: &str, method: &str, code: Option<u16>) {
        let code = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.count("request", &code, 1);
        self.requests
            .get_or_create(&labels(&[
                ("code", &code),
                ("host", host),
                ("method", method),
            ]))
            .inc();
    }

    /// A request answered with `code` is tried again.
    pub fn retry(&self, host: &str, verb: &str, code: u16) {
        self.count("retry", &code.to_string(), 1);
        self.retries
            .get_or_create(&labels(&[
                ("code", &code.to_string()),
                ("host", host),
                ("verb", verb),
            ]))
            .inc();
    }

    /// A request waited `seconds` for its token.
    pub fn rate_limited(&self, host: &str, verb: &str, seconds: f64) {
        self.count("wait", "", 1);
        self.count("wait_us", "", (seconds * 1e6) as u64);
        self.rate_limiter
            .get_or_create(&labels(&[("host", host), ("verb", verb)]))
            .observe(seconds);
    }

    /// A watch of `kind` ended and starts again.
    pub fn watch_restart(&self, kind: &str, reason: &str) {
        self.count("watch", reason, 1);
        self.watch_restarts
            .get_or_create(&labels(&[("kind", kind), ("reason", reason)]))
            .inc();
    }

    /// Attempts answered so far with `code` (`<error>`: none), for reports and tests.
    pub fn requests_with(&self, code: &str) -> u64 {
        self.tally("request", code)
    }

    /// Retries so far after `code`.
    pub fn retries_after(&self, code: u16) -> u64 {
        self.tally("retry", &code.to_string())
    }

    /// Watch restarts so far for `reason`.
    pub fn watch_restarts(&self, reason: &str) -> u64 {
        self.tally("watch", reason)
    }

    /// Requests that waited for a token, and how long they waited in all (seconds).
    pub fn rate_limiter_waits(&self) -> (u64, f64) {
        let tallies = self.lock();
        (
            tallies.get(&("wait", String::new())).copied().unwrap_or(0),
            tallies
                .get(&("wait_us", String::new()))
                .copied()
                .unwrap_or(0) as f64
                / 1e6,
        )
    }

    fn count(&self, what: &'static str, key: &str, n: u64) {
        *self.lock().entry((what, key.to_owned())).or_default() += n;
    }

    fn tally(&self, what: &'static str, key: &str) -> u64 {
        self.lock()
            .get(&(what, key.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tallies> {
        self.tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
