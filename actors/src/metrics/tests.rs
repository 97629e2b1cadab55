use std::collections::{BTreeMap, BTreeSet};

use super::*;
use karpenter_core::vocab::labels as vocab;

/// Metrics with something recorded in every family (empty ones are left out of the
/// exposition).
fn recorded() -> Metrics {
    let m = Metrics::new();
    m.nodeclaim_created("default");
    m.nodeclaim_terminated("default", "spot_interrupted");
    m.scheduling_round(0.01);
    m.set_queue_depth(3);
    m.set_ignored_pods(2);
    m.journal_upload_lag(42.5);
    m.journal_uploaded(4096);
    m.journal_upload_failed("throttled");
    m.interruption_received("spot_interrupted");
    m.nodeclaim_disrupted("default", "empty", "spot");
    m.disruption_decision("delete", "empty", "empty");
    m.set_disruption_eligible("drifted", 2);
    m.set_allowed_disruptions("default", "empty", 1);
    m.disruption_evaluation("emptiness", 0.002);
    m.consolidation_timeout("multi");
    m.consolidation_move("rejected", "default", "Balanced", Some(0.42));
    m.consolidation_move("approved", "default", "WhenEmptyOrUnderutilized", None);
    m.set_nodes(&[node(
        "n1",
        Some("default"),
        Resources::cpu_memory(500, 1 << 30),
    )]);
    m.node_created("default");
    m.node_terminated("default");
    m.set_nodepool_limits(
        "default",
        &Limits {
            resources: [(ResourceName::Cpu, 1_000_000)].into(),
            nodes: Some(50),
        },
    );
    m.cloud_call("nodeclaim.lifecycle", "Create", "aws", 0.2);
    m.set_pod_state("default", "web-1", "", Some("Pending"), None);
    m.set_pod_state(
        "default",
        "web-1",
        "n1",
        Some("Running"),
        Some(("", "Pending")),
    );
    m.interruption_deleted();
    m.interruption_queue_duration(1.5);
    m.cloudprovider_error("Create", "InsufficientCapacityError");
    m.cloud_retry("ec2", "CreateFleet");
    m.cloud_attempt_error("ec2", "CreateFleet", "server");
    m.set_nodepool_usage("default", &Resources::cpu_memory(2000, 1 << 30));
    m.nodeclaim_ended("default", Some(95.0), true, Some(7200.0));
    m.pod_bound_after(61.0);
    m
}

#[test]
fn exposes_upstream_names() {
    let text = recorded().encode();
    for line in [
        "karpenter_nodeclaims_created_total{nodepool=\"default\"} 1",
        "karpenter_nodeclaims_terminated_total{nodepool=\"default\",reason=\"spot_interrupted\"} 1",
        "karpenter_scheduler_queue_depth 3",
        "karpenter_scheduler_ignored_pods_count 2",
        "karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"} 1",
        "karpenter_nodes_allocatable{node_name=\"n1\",nodepool=\"default\",resource_type=\"cpu\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 1.93",
        "karpenter_nodes_total_pod_requests{node_name=\"n1\",nodepool=\"default\",resource_type=\"cpu\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 0.5",
        "karpenter_nodes_total_daemon_requests{node_name=\"n1\",nodepool=\"default\",resource_type=\"memory\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 134217728",
        "karpenter_nodes_created_total{nodepool=\"default\"} 1",
        "karpenter_nodes_terminated_total{nodepool=\"default\"} 1",
        "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"cpu\"} 1000",
        "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"nodes\"} 50",
        "karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"aws\"} 1",
        "karpenter_pods_state{namespace=\"default\",name=\"web-1\",node=\"n1\",phase=\"Running\"} 1",
        "karpenter_scheduler_scheduling_duration_seconds_count 1",
        "karpenter_nodeclaims_disrupted_total{nodepool=\"default\",reason=\"empty\",capacity_type=\"spot\"} 1",
        "karpenter_voluntary_disruption_decisions_total{decision=\"delete\",reason=\"empty\",consolidation_type=\"empty\"} 1",
        "karpenter_voluntary_disruption_eligible_nodes{reason=\"drifted\"} 2",
        "karpenter_nodepools_allowed_disruptions{nodepool=\"default\",reason=\"empty\"} 1",
        "karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type=\"multi\"} 1",
        "karpenter_consolidation_moves_total{decision=\"rejected\",nodepool=\"default\",policy=\"Balanced\"} 1",
        "karpenter_consolidation_moves_total{decision=\"approved\",nodepool=\"default\",policy=\"WhenEmptyOrUnderutilized\"} 1",
        "karpenter_consolidation_score_bucket{le=\"0.5\",decision=\"rejected\",nodepool=\"default\",policy=\"Balanced\"} 1",
        "karpenter_consolidation_score_bucket{le=\"0.33\",decision=\"rejected\",nodepool=\"default\",policy=\"Balanced\"} 0",
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{method=\"emptiness\"} 1",
        "karpenter_nodeclaims_termination_duration_seconds_sum{nodepool=\"default\"} 95.0",
        "karpenter_nodeclaims_termination_duration_seconds_bucket{le=\"128.0\",nodepool=\"default\"} 1",
        "karpenter_nodeclaims_termination_duration_seconds_bucket{le=\"64.0\",nodepool=\"default\"} 0",
        "karpenter_nodes_termination_duration_seconds_count{nodepool=\"default\"} 1",
        "karpenter_nodes_lifetime_duration_seconds_sum{nodepool=\"default\"} 7200.0",
        "karpenter_pods_provisioning_bound_duration_seconds_sum 61.0",
        "karpenter_pods_provisioning_bound_duration_seconds_bucket{le=\"64.0\"} 1",
        "karpenter_journal_upload_lag_seconds 42.5",
        "karpenter_journal_uploaded_bytes_total 4096",
        "karpenter_journal_upload_errors_total{reason=\"throttled\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(
        !text.contains("phase=\"Pending\""),
        "the old series is gone"
    );
    assert!(text.ends_with("# EOF\n"));
    let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP")).collect();
    assert_eq!(help.len(), 35, "{text}");
    for line in help {
        assert!(
            line.ends_with('.') && !line.ends_with(".."),
            "help text should end in one full stop: {line}"
        );
    }
}

/// The series of an exposition: counters end in `_total`, histograms are their
/// `_bucket`, `_sum` and `_count`.
fn series(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((family, kind)) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.split_once(' '))
        else {
            continue;
        };
        let names = match kind {
            "counter" => vec![format!("{family}_total")],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|suffix| format!("{family}{suffix}"))
                .collect(),
            _ => vec![family.to_owned()],
        };
        for name in names {
            out.insert(name, family.to_owned());
        }
    }
    out
}

/// The label names each exported series carries, by series name.
fn series_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let labels = out.entry(name.to_owned()).or_default();
        for pair in rest.split("\",") {
            if let Some((label, _)) = pair.split_once('=') {
                labels.insert(label.to_owned());
            }
        }
    }
    out
}

/// The metric names an expression queries, each with the label names its selector matches
/// on (`name{a="x",b=~"$b"}`).
fn queried(expr: &str) -> Vec<(&str, Vec<&str>)> {
    expr.match_indices("karpenter_")
        .map(|(at, _)| {
            let rest = &expr[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let matched = rest[end..]
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .map(|(selector, _)| {
                    selector
                        .split(',')
                        .filter_map(|m| m.split(['=', '!']).next())
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            (&rest[..end], matched)
        })
        .collect()
}

/// The Grafana dashboard in deploy/grafana queries only series the controller exports, on
/// labels they carry and variables it defines, and has a panel for every metric family.
#[test]
fn the_dashboard_queries_what_is_exported() {
    let text = recorded().encode();
    let exported = series(&text);
    let labelled = series_labels(&text);
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../deploy/grafana/karpenter-rs.json"))
            .expect("the dashboard is JSON");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert_eq!(variables[0]["name"], "datasource");
    let defined: BTreeSet<&str> = variables
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let check = |place: &str, expr: &str| -> Vec<String> {
        let names = queried(expr);
        assert!(!names.is_empty(), "{place}: {expr}");
        for variable in expr.split('$').skip(1) {
            let name: String = variable
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                name.starts_with("__") || defined.contains(name.as_str()),
                "{place}: ${name} is not a dashboard variable"
            );
        }
        names
            .into_iter()
            .map(|(name, matched)| {
                let family = exported
                    .get(name)
                    .unwrap_or_else(|| panic!("{place}: {name} is not exported"));
                for label in matched {
                    assert!(
                        labelled.get(name).is_some_and(|l| l.contains(label)),
                        "{place}: {name} has no label {label}"
                    );
                }
                family.clone()
            })
            .collect()
    };
    let mut used = BTreeSet::new();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let name = variable["name"].as_str().unwrap_or_default();
        let query = variable["query"]["query"].as_str().unwrap_or_default();
        let (metric, label) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.split_once(", "))
            .unwrap_or_else(|| panic!("variable {name}: {query}"));
        assert!(
            labelled.get(metric).is_some_and(|l| l.contains(label)),
            "variable {name}: {metric} has no label {label}"
        );
    }
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default();
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} queries nothing");
        for target in targets {
            used.extend(check(title, target["expr"].as_str().unwrap_or_default()));
        }
    }
    let families: BTreeSet<String> = exported.into_values().collect();
    let unused: Vec<_> = families.difference(&used).collect();
    assert!(unused.is_empty(), "no panel shows {unused:?}");
}

/// A labelled node whose pods request `pods`, and a DaemonSet's pod 100m and 128Mi.
fn node(name: &str, pool: Option<&str>, pods: Resources) -> NodeInfo {
    let daemon = Resources::cpu_memory(100, 128 << 20).with(ResourceName::Pods, 1);
    let mut node_labels: BTreeMap<String, String> = [
        (vocab::ARCH, "amd64"),
        (vocab::CAPACITY_TYPE, "spot"),
        (vocab::INSTANCE_TYPE, "m5.large"),
        (vocab::OS, "linux"),
        (vocab::ZONE, "us-west-2a"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Some(pool) = pool {
        node_labels.insert(vocab::NODEPOOL.to_owned(), pool.to_owned());
    }
    NodeInfo {
        name: name.into(),
        provider_id: String::new(),
        labels: node_labels,
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(1930, 7 << 30).with(ResourceName::Pods, 29),
        requested: pods.add(&daemon),
        daemon_requested: daemon,
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: Default::default(),
        attached: Vec::new(),
        ready: true,
        unschedulable: false,
    }
}

/// A NodeClaim that ended without a node counts only its own termination; one whose
/// termination start this process did not see counts no termination, only its node's
/// lifetime.
#[test]
fn durations_count_only_what_was_seen() {
    let m = Metrics::new();
    m.nodeclaim_ended("default", Some(3.0), false, Some(50.0));
    m.nodeclaim_ended("default", None, true, Some(600.0));
    let text = m.encode();
    for line in [
        "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1",
        "karpenter_nodes_lifetime_duration_seconds_count{nodepool=\"default\"} 1",
        "karpenter_nodes_lifetime_duration_seconds_sum{nodepool=\"default\"} 600.0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(
        !text.contains("karpenter_nodes_termination_duration_seconds_count"),
        "{text}"
    );
}

/// Node series follow the list of nodes: a node that left loses every series, a node no
/// NodePool owns is `N/A`, GPUs appear only where a node has some, and requests split into
/// DaemonSet pods and the rest.
#[test]
fn node_series_follow_the_nodes() {
    let m = Metrics::new();
    let gpu = node("gpu", Some("ml"), Resources::ZERO);
    let gpu = NodeInfo {
        allocatable: gpu.allocatable.with(ResourceName::NvidiaGpu, 1),
        ..gpu
    };
    m.set_nodes(&[
        node(
            "n1",
            Some("default"),
            Resources::cpu_memory(500, 1 << 30).with(ResourceName::Pods, 1),
        ),
        node("n2", None, Resources::ZERO),
        gpu,
    ]);
    let text = m.encode();
    let count = |node: &str| {
        let name = format!("node_name=\"{node}\"");
        text.lines()
            .filter(|l| l.starts_with("karpenter_nodes_") && l.contains(&name))
            .count()
    };
    // cpu, memory, pods and ephemeral-storage, in three families; and GPUs where there are.
    assert_eq!(count("n1"), 12, "{text}");
    assert_eq!(count("n2"), 12);
    assert_eq!(count("gpu"), 15);
    assert!(text.contains("node_name=\"n2\",nodepool=\"N/A\""));
    // One pod of each kind.
    for line in [
        "karpenter_nodes_total_pod_requests{node_name=\"n1\",nodepool=\"default\",resource_type=\"pods\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 1",
        "karpenter_nodes_total_daemon_requests{node_name=\"n1\",nodepool=\"default\",resource_type=\"pods\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 1",
        "karpenter_nodes_total_pod_requests{node_name=\"n2\",nodepool=\"N/A\",resource_type=\"cpu\",arch=\"amd64\",capacity_type=\"spot\",instance_type=\"m5.large\",os=\"linux\",zone=\"us-west-2a\"} 0.0",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    m.set_nodes(&[node("n2", None, Resources::ZERO)]);
    let text = m.encode();
    assert!(!text.contains("node_name=\"n1\""), "{text}");
    assert!(!text.contains("node_name=\"gpu\""), "{text}");
    assert!(text.contains("node_name=\"n2\""));
}

/// Limits are written for what is limited, replaced when the pool changes, and gone with a
/// deleted pool.
#[test]
fn nodepool_limits_follow_the_pool() {
    let m = Metrics::new();
    let limits = Limits {
        resources: [
            (ResourceName::Cpu, 100_000),
            (ResourceName::Memory, 1 << 40),
        ]
        .into(),
        nodes: None,
    };
    m.set_nodepool_limits("default", &limits);
    let limit_lines = |m: &Metrics| {
        m.encode()
            .lines()
            .filter(|l| l.starts_with("karpenter_nodepools_limit{"))
            .map(str::to_owned)
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        limit_lines(&m),
        [
            "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"cpu\"} 100.0",
            "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"memory\"} 1099511627776.0",
        ]
        .map(str::to_owned)
        .into()
    );
    m.set_nodepool_limits(
        "default",
        &Limits {
            resources: Default::default(),
            nodes: Some(3),
        },
    );
    assert_eq!(
        limit_lines(&m),
        ["karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"nodes\"} 3.0"]
            .map(str::to_owned)
            .into()
    );
    m.forget_nodepool_limits("default");
    assert!(limit_lines(&m).is_empty());
}
