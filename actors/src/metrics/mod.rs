//! Prometheus metrics under upstream Karpenter's names, for what exists so far. Counters are
//! registered without `_total`; the encoder appends it.

mod client;
mod cloud;
mod durations;
mod journal;
mod nodes;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use karpenter_core::model::{ResourceName, Resources};
use karpenter_core::ports::NodeInfo;
use karpenter_core::scheduling::Limits;

pub use client::{ClientMetrics, client};
pub use cloud::MeasuredCloud;
pub use nodes::NO_NODEPOOL;

/// Label pairs.
pub type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The metrics the actors update.
pub struct Metrics {
    registry: Registry,
    nodeclaims_created: Family<Labels, Counter>,
    nodeclaims_terminated: Family<Labels, Counter>,
    durations: durations::Durations,
    scheduling_duration: Histogram,
    queue_depth: Gauge,
    ignored_pods: Gauge,
    nodes: nodes::NodeGauges,
    journal: journal::JournalMetrics,
    nodes_created: Family<Labels, Counter>,
    nodes_terminated: Family<Labels, Counter>,
    pods_state: Family<Labels, Gauge>,
    interruption_received: Family<Labels, Counter>,
    interruption_deleted: Counter,
    interruption_queue_duration: Histogram,
    cloudprovider_errors: Family<Labels, Counter>,
    cloud_retries: Family<Labels, Counter>,
    cloud_attempt_errors: Family<Labels, Counter>,
    /// The two above summed, for reports.
    cloud_totals: (Counter, Counter),
    nodepools_usage: Family<Labels, Gauge<f64, AtomicU64>>,
    nodepools_limit: Family<Labels, Gauge<f64, AtomicU64>>,
    cloud_duration: Family<Labels, Histogram>,
    nodeclaims_disrupted: Family<Labels, Counter>,
    disruption_decisions: Family<Labels, Counter>,
    disruption_eligible: Family<Labels, Gauge>,
    disruption_evaluation: Family<Labels, Histogram>,
    nodepools_allowed_disruptions: Family<Labels, Gauge>,
    consolidation_timeouts: Family<Labels, Counter>,
    consolidation_score: Family<Labels, Histogram>,
    consolidation_moves: Family<Labels, Counter>,
    unhealthy_disrupted: Family<Labels, Counter>,
}

/// Upstream's buckets of `karpenter_consolidation_score` (the threshold is 0.5).
const SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0];

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Registers a metric whose help text is a sentence. The text exposition ends every help
/// text with a full stop itself, so the sentence's own is dropped here.
fn register(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: impl prometheus_client::registry::Metric,
) {
    registry.register(name, help.trim_end_matches('.'), metric);
}

fn resource_value(name: ResourceName, value: i64) -> f64 {
    match name {
        ResourceName::Cpu => value as f64 / 1000.0,
        _ => value as f64,
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            durations: durations::Durations::default(),
            scheduling_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            queue_depth: Gauge::default(),
            ignored_pods: Gauge::default(),
            nodes: nodes::NodeGauges::default(),
            journal: journal::JournalMetrics::default(),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            pods_state: Family::default(),
            interruption_received: Family::default(),
            interruption_deleted: Counter::default(),
            interruption_queue_duration: Histogram::new(exponential_buckets(0.1, 2.0, 14)),
            cloudprovider_errors: Family::default(),
            cloud_retries: Family::default(),
            cloud_attempt_errors: Family::default(),
            cloud_totals: Default::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            cloud_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            nodeclaims_disrupted: Family::default(),
            disruption_decisions: Family::default(),
            disruption_eligible: Family::default(),
            disruption_evaluation: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            nodepools_allowed_disruptions: Family::default(),
            consolidation_timeouts: Family::default(),
            consolidation_score: Family::new_with_constructor(|| Histogram::new(SCORE_BUCKETS)),
            consolidation_moves: Family::default(),
            unhealthy_disrupted: Family::default(),
            registry: Registry::default(),
        };
        register(
            &mut registry,
            "karpenter_nodeclaims_created",
            "Number of NodeClaims created, by NodePool.",
            m.nodeclaims_created.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodeclaims_terminated",
            "Number of NodeClaims terminated, by NodePool and reason.",
            m.nodeclaims_terminated.clone(),
        );
        register(
            &mut registry,
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations.",
            m.scheduling_duration.clone(),
        );
        register(
            &mut registry,
            "karpenter_scheduler_queue_depth",
            "Pods waiting for a scheduling round.",
            m.queue_depth.clone(),
        );
        register(
            &mut registry,
            "karpenter_scheduler_ignored_pods_count",
            "Pods the last scheduling round left out because they fail validation (a restricted label selected, a missing PersistentVolumeClaim).",
            m.ignored_pods.clone(),
        );
        m.nodes.register(&mut registry);
        m.journal.register(&mut registry);
        register(
            &mut registry,
            "karpenter_nodes_created",
            "Nodes that joined the cluster for a NodeClaim, by NodePool.",
            m.nodes_created.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodes_terminated",
            "Nodes whose NodeClaim terminated, by NodePool.",
            m.nodes_terminated.clone(),
        );
        register(
            &mut registry,
            "karpenter_pods_state",
            "Pod state (1 per pod) with its phase and node.",
            m.pods_state.clone(),
        );
        register(
            &mut registry,
            "karpenter_interruption_received_messages",
            "Interruption messages received, by message type.",
            m.interruption_received.clone(),
        );
        register(
            &mut registry,
            "karpenter_interruption_deleted_messages",
            "Interruption messages deleted from the queue after handling.",
            m.interruption_deleted.clone(),
        );
        register(
            &mut registry,
            "karpenter_interruption_message_queue_duration_seconds",
            "Time from an interruption event to its message being handled.",
            m.interruption_queue_duration.clone(),
        );
        register(
            &mut registry,
            "karpenter_cloudprovider_errors",
            "Cloud provider errors, by method and error.",
            m.cloudprovider_errors.clone(),
        );
        register(
            &mut registry,
            "karpenter_cloudprovider_retries",
            "Attempts of cloud API calls after the first (backed off and tried again), by service and operation.",
            m.cloud_retries.clone(),
        );
        register(
            &mut registry,
            "karpenter_cloudprovider_attempt_errors",
            "Failed attempts of cloud API calls (retried or not), by service, operation and kind: timeout, connection, server, client, other.",
            m.cloud_attempt_errors.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodepools_usage",
            "Resources counted against a NodePool's limits (CPU in cores).",
            m.nodepools_usage.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodepools_limit",
            "A NodePool's limits by resource type (CPU in cores; nodes as a count).",
            m.nodepools_limit.clone(),
        );
        register(
            &mut registry,
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider calls, by the controller that made them, method and provider.",
            m.cloud_duration.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodeclaims_disrupted",
            "Number of NodeClaims disrupted, by NodePool, reason and capacity type.",
            m.nodeclaims_disrupted.clone(),
        );
        register(
            &mut registry,
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions made, by decision, reason and consolidation type.",
            m.disruption_decisions.clone(),
        );
        register(
            &mut registry,
            "karpenter_voluntary_disruption_eligible_nodes",
            "Nodes a disruption method could act on now, before budgets, by reason.",
            m.disruption_eligible.clone(),
        );
        register(
            &mut registry,
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Time a disruption pass took to decide, by method.",
            m.disruption_evaluation.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodepools_allowed_disruptions",
            "Nodes of a NodePool that may be disrupted now, by reason.",
            m.nodepools_allowed_disruptions.clone(),
        );
        register(
            &mut registry,
            "karpenter_voluntary_disruption_consolidation_timeouts",
            "Consolidation searches stopped at their timeout, by consolidation type.",
            m.consolidation_timeouts.clone(),
        );
        register(
            &mut registry,
            "karpenter_consolidation_score",
            "Balanced consolidation scores of the moves scored, by decision, NodePool and policy.",
            m.consolidation_score.clone(),
        );
        register(
            &mut registry,
            "karpenter_consolidation_moves",
            "Consolidation moves approved or rejected, by decision, NodePool and policy.",
            m.consolidation_moves.clone(),
        );
        register(
            &mut registry,
            "karpenter_nodeclaims_unhealthy_disrupted",
            "NodeClaims deleted by node repair, by the condition that made them unhealthy, NodePool, capacity type and image.",
            m.unhealthy_disrupted.clone(),
        );
        m.durations.register(&mut registry);
        client::client().register(&mut registry);
        Metrics { registry, ..m }
    }

    /// A NodeClaim was disrupted (a disruption command's candidate, or expired).
    pub fn nodeclaim_disrupted(&self, nodepool: &str, reason: &str, capacity_type: &str) {
        self.nodeclaims_disrupted
            .get_or_create(&labels(&[
                ("nodepool", nodepool),
                ("reason", reason),
                ("capacity_type", capacity_type),
            ]))
            .inc();
    }

    /// A disruption command was decided: `decision` is `delete` or `replace`.
    pub fn disruption_decision(&self, decision: &str, reason: &str, consolidation_type: &str) {
        self.disruption_decisions
            .get_or_create(&labels(&[
                ("decision", decision),
                ("reason", reason),
                ("consolidation_type", consolidation_type),
            ]))
            .inc();
    }

    /// Nodes a method could disrupt now, before budgets.
    pub fn set_disruption_eligible(&self, reason: &str, nodes: usize) {
        self.disruption_eligible
            .get_or_create(&labels(&[("reason", reason)]))
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    /// A disruption pass took `seconds` to decide.
    pub fn disruption_evaluation(&self, method: &str, seconds: f64) {
        self.disruption_evaluation
            .get_or_create(&labels(&[("method", method)]))
            .observe(seconds.max(0.0));
    }

    /// A consolidation search stopped at its timeout (`multi` or `single`).
    pub fn consolidation_timeout(&self, consolidation_type: &str) {
        self.consolidation_timeouts
            .get_or_create(&labels(&[("consolidation_type", consolidation_type)]))
            .inc();
    }

    /// A NodeClaim repaired for `condition` (`Ready`, …; labelled in snake case as upstream).
    pub fn unhealthy_disrupted(
        &self,
        condition: &str,
        nodepool: &str,
        capacity_type: &str,
        image_id: &str,
    ) {
        let snake = snake_case(condition);
        let labels = labels(&[
            ("condition", &snake),
            ("nodepool", nodepool),
            ("capacity_type", capacity_type),
            ("image_id", image_id),
        ]);
        self.unhealthy_disrupted.get_or_create(&labels).inc();
    }

    /// A consolidation move decided (`approved`) or refused (`rejected`) in `nodepool` of
    /// `policy`, with its Balanced score when it was scored.
    pub fn consolidation_move(
        &self,
        decision: &str,
        nodepool: &str,
        policy: &str,
        score: Option<f64>,
    ) {
        let labels = labels(&[
            ("decision", decision),
            ("nodepool", nodepool),
            ("policy", policy),
        ]);
        self.consolidation_moves.get_or_create(&labels).inc();
        if let Some(score) = score {
            self.consolidation_score
                .get_or_create(&labels)
                .observe(score);
        }
    }

    /// How many more of a NodePool's nodes may be disrupted now for a reason.
    pub fn set_allowed_disruptions(&self, nodepool: &str, reason: &str, nodes: usize) {
        self.nodepools_allowed_disruptions
            .get_or_create(&labels(&[("nodepool", nodepool), ("reason", reason)]))
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// A NodeClaim was created.
    pub fn nodeclaim_created(&self, nodepool: &str) {
        self.nodeclaims_created
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A NodeClaim was terminated.
    pub fn nodeclaim_terminated(&self, nodepool: &str, reason: &str) {
        self.nodeclaims_terminated
            .get_or_create(&labels(&[("nodepool", nodepool), ("reason", reason)]))
            .inc();
    }

    /// A NodeClaim ended `termination` seconds after its drain or termination started (when
    /// this process saw it start); if it had a node, the node ended with it, having lived
    /// `lifetime` seconds since its instance launched (when the cloud said when).
    pub fn nodeclaim_ended(
        &self,
        nodepool: &str,
        termination: Option<f64>,
        had_node: bool,
        lifetime: Option<f64>,
    ) {
        self.durations
            .ended(nodepool, termination, had_node, lifetime);
    }

    /// A pod bound `seconds` after it was first seen unschedulable.
    pub fn pod_bound_after(&self, seconds: f64) {
        self.durations.pod_bound(seconds);
    }

    /// A round took `seconds`.
    pub fn scheduling_round(&self, seconds: f64) {
        self.scheduling_duration.observe(seconds);
    }

    /// Pods waiting for a round.
    pub fn set_queue_depth(&self, pods: usize) {
        self.queue_depth.set(pods as i64);
    }

    /// Pods the last round left out because they fail validation.
    pub fn set_ignored_pods(&self, pods: usize) {
        self.ignored_pods
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    /// Every node's allocatable and requests, from the whole list of nodes.
    pub fn set_nodes(&self, nodes: &[NodeInfo]) {
        self.nodes.set(nodes);
    }

    /// A NodeClaim's node joined.
    pub fn node_created(&self, nodepool: &str) {
        self.nodes_created
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A NodeClaim that had a node terminated.
    pub fn node_terminated(&self, nodepool: &str) {
        self.nodes_terminated
            .get_or_create(&labels(&[("nodepool", nodepool)]))
            .inc();
    }

    /// A pod's state; `phase` `None` removes it.
    pub fn set_pod_state(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        phase: Option<&str>,
        previous: Option<(&str, &str)>,
    ) {
        if let Some((old_node, old_phase)) = previous {
            self.pods_state.remove(&labels(&[
                ("namespace", namespace),
                ("name", name),
                ("node", old_node),
                ("phase", old_phase),
            ]));
        }
        if let Some(phase) = phase {
            self.pods_state
                .get_or_create(&labels(&[
                    ("namespace", namespace),
                    ("name", name),
                    ("node", node),
                    ("phase", phase),
                ]))
                .set(1);
        }
    }

    /// An interruption message arrived.
    pub fn interruption_received(&self, message_type: &str) {
        self.interruption_received
            .get_or_create(&labels(&[("message_type", message_type)]))
            .inc();
    }

    /// How long ago the oldest journal record not yet in the history store was recorded.
    pub fn journal_upload_lag(&self, seconds: f64) {
        self.journal.lag(seconds);
    }

    /// Bytes of journal segments stored in the history store.
    pub fn journal_uploaded(&self, bytes: u64) {
        self.journal.uploaded(bytes);
    }

    /// A journal shipping pass failed for `reason`.
    pub fn journal_upload_failed(&self, reason: &str) {
        self.journal.failed(reason);
    }

    /// The journal's upload lag last set, in seconds.
    pub fn journal_upload_lag_seconds(&self) -> f64 {
        self.journal.lag_seconds()
    }

    /// An interruption message was deleted after handling.
    pub fn interruption_deleted(&self) {
        self.interruption_deleted.inc();
    }

    /// An interruption message was handled `seconds` after its event happened.
    pub fn interruption_queue_duration(&self, seconds: f64) {
        self.interruption_queue_duration.observe(seconds.max(0.0));
    }

    /// A cloud call failed.
    pub fn cloudprovider_error(&self, method: &str, error: &str) {
        self.cloudprovider_errors
            .get_or_create(&labels(&[
                ("controller", "nodeclaim.lifecycle"),
                ("method", method),
                ("error", error),
            ]))
            .inc();
    }

    /// A cloud API call backed off and tried again.
    pub fn cloud_retry(&self, service: &str, operation: &str) {
        self.cloud_retries
            .get_or_create(&labels(&[("service", service), ("operation", operation)]))
            .inc();
        self.cloud_totals.0.inc();
    }

    /// An attempt of a cloud API call failed.
    pub fn cloud_attempt_error(&self, service: &str, operation: &str, kind: &str) {
        self.cloud_attempt_errors
            .get_or_create(&labels(&[
                ("service", service),
                ("operation", operation),
                ("kind", kind),
            ]))
            .inc();
        self.cloud_totals.1.inc();
    }

    /// Cloud API retries and failed attempts so far.
    pub fn cloud_attempts(&self) -> (u64, u64) {
        (self.cloud_totals.0.get(), self.cloud_totals.1.get())
    }

    /// A NodePool's limits: one series per limited resource, and `nodes` when the node
    /// count is limited.
    pub fn set_nodepool_limits(&self, nodepool: &str, limits: &Limits) {
        self.forget_nodepool_limits(nodepool);
        for (r, value) in &limits.resources {
            self.nodepools_limit
                .get_or_create(&labels(&[
                    ("nodepool", nodepool),
                    ("resource_type", r.as_str()),
                ]))
                .set(resource_value(*r, *value));
        }
        if let Some(nodes) = limits.nodes {
            self.nodepools_limit
                .get_or_create(&labels(&[
                    ("nodepool", nodepool),
                    ("resource_type", "nodes"),
                ]))
                .set(nodes as f64);
        }
    }

    /// A NodePool was deleted: its limits no longer exist (its usage lasts while its
    /// NodeClaims do).
    pub fn forget_nodepool_limits(&self, nodepool: &str) {
        let limited = ResourceName::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(["nodes"]);
        for resource_type in limited {
            self.nodepools_limit.remove(&labels(&[
                ("nodepool", nodepool),
                ("resource_type", resource_type),
            ]));
        }
    }

    /// A cloud provider call `controller` made took `seconds`.
    pub fn cloud_call(&self, controller: &str, method: &str, provider: &str, seconds: f64) {
        self.cloud_duration
            .get_or_create(&labels(&[
                ("controller", controller),
                ("method", method),
                ("provider", provider),
            ]))
            .observe(seconds.max(0.0));
    }

    /// A NodePool's usage.
    pub fn set_nodepool_usage(&self, nodepool: &str, usage: &Resources) {
        for r in [
            ResourceName::Cpu,
            ResourceName::Memory,
            ResourceName::Pods,
            ResourceName::NvidiaGpu,
        ] {
            self.nodepools_usage
                .get_or_create(&labels(&[
                    ("nodepool", nodepool),
                    ("resource_type", r.as_str()),
                ]))
                .set(resource_value(r, usage.get(r)));
        }
    }
}

#[cfg(test)]
mod tests;

/// `AcceleratedHardwareReady` → `accelerated_hardware_ready`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
