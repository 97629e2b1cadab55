//! The journal shipper's metrics (karpenter-rs's own: upstream has no journal):
//! `karpenter_journal_upload_lag_seconds`, `karpenter_journal_uploaded_bytes` and
//! `karpenter_journal_upload_errors{reason}`.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Labels, labels, register};

/// The shipper's series.
#[derive(Default)]
pub(super) struct JournalMetrics {
    upload_lag: Gauge<f64, AtomicU64>,
    uploaded_bytes: Counter,
    upload_errors: Family<Labels, Counter>,
}

impl JournalMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "karpenter_journal_upload_lag_seconds",
            "How long ago the oldest journal record not yet in the history store was recorded (0 when all are).",
            self.upload_lag.clone(),
        );
        register(
            registry,
            "karpenter_journal_uploaded_bytes",
            "Bytes of journal segments stored in the history store.",
            self.uploaded_bytes.clone(),
        );
        register(
            registry,
            "karpenter_journal_upload_errors",
            "Failed journal shipping passes, by reason.",
            self.upload_errors.clone(),
        );
    }

    pub(super) fn lag(&self, seconds: f64) {
        self.upload_lag.set(seconds);
    }

    pub(super) fn uploaded(&self, bytes: u64) {
        self.uploaded_bytes.inc_by(bytes);
    }

    pub(super) fn failed(&self, reason: &str) {
        self.upload_errors
            .get_or_create(&labels(&[("reason", reason)]))
            .inc();
    }

    pub(super) fn lag_seconds(&self) -> f64 {
        self.upload_lag.get()
    }
}
