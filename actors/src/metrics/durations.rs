//! How long NodeClaims and their nodes took to terminate, and how long nodes lived, per
//! NodePool, under upstream's names (`karpenter_nodeclaims_termination_duration_seconds`,
//! `karpenter_nodes_termination_duration_seconds`, `karpenter_nodes_lifetime_duration_seconds`),
//! and how long pods waited for a node (`karpenter_pods_provisioning_bound_duration_seconds`).
//! Upstream's two termination durations are summaries; prometheus-client has no summary type,
//! so all three are histograms here: `_sum` and `_count` are the same series, and
//! `histogram_quantile` gives the quantiles a summary would have reported.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Labels, labels, register};

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// 1 s to about 9 h: from a node that drains at once to one held by a long
/// terminationGracePeriod.
fn termination_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// 1 minute to about 23 days.
fn lifetime_buckets() -> Histogram {
    Histogram::new(exponential_buckets(60.0, 2.0, 16))
}

/// 0.5 s to about 68 minutes.
fn pending_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 14))
}

/// The four families.
pub(super) struct Durations {
    nodeclaim_termination: Histograms,
    node_termination: Histograms,
    node_lifetime: Histograms,
    pod_bound: Histogram,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            nodeclaim_termination: Family::new_with_constructor(termination_buckets),
            node_termination: Family::new_with_constructor(termination_buckets),
            node_lifetime: Family::new_with_constructor(lifetime_buckets),
            pod_bound: pending_buckets(),
        }
    }
}

impl Durations {
    pub(super) fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "karpenter_nodeclaims_termination_duration_seconds",
            "Duration of NodeClaim termination in seconds, from its drain or termination starting to its end.",
            self.nodeclaim_termination.clone(),
        );
        register(
            registry,
            "karpenter_nodes_termination_duration_seconds",
            "The time taken between a node's deletion request and the removal of its finalizer.",
            self.node_termination.clone(),
        );
        register(
            registry,
            "karpenter_nodes_lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation.",
            self.node_lifetime.clone(),
        );
        register(
            registry,
            "karpenter_pods_provisioning_bound_duration_seconds",
            "The time from when a pod was first seen unschedulable until it was bound, each time it waited.",
            self.pod_bound.clone(),
        );
    }

    /// A pod bound `seconds` after it was first seen unschedulable.
    pub(super) fn pod_bound(&self, seconds: f64) {
        self.pod_bound.observe(seconds);
    }

    /// A NodeClaim ended `termination` seconds after its termination started; its node, if it
    /// had one, ended with it after living `lifetime` seconds (when its launch time is known).
    pub(super) fn ended(
        &self,
        nodepool: &str,
        termination: Option<f64>,
        node: bool,
        lifetime: Option<f64>,
    ) {
        let pool = labels(&[("nodepool", nodepool)]);
        if let Some(seconds) = termination {
            self.nodeclaim_termination
                .get_or_create(&pool)
                .observe(seconds);
            if node {
                self.node_termination.get_or_create(&pool).observe(seconds);
            }
        }
        if let Some(seconds) = lifetime.filter(|_| node) {
            self.node_lifetime.get_or_create(&pool).observe(seconds);
        }
    }
}
