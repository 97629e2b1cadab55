//! What `bench cluster` reads off the cluster, as upstream's report reads it (pure): the
//! nodes Karpenter made (labelled `karpenter.sh/nodepool`), their cost, and their reserved
//! utilisation (each node's pod requests over its allocatable, averaged over the nodes, as
//! upstream's `Monitor.AvgUtilization`); which nodes are draining (deleting, or carrying
//! `karpenter.sh/disrupted`); and the request counters of Prometheus text.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::model::quantity::Quantity;
use karpenter_core::vocab::labels;

/// A phase's cluster figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Nodes Karpenter made.
    pub nodes: usize,
    /// Their instances' price, USD an hour.
    pub cost: f64,
    /// Average reserved CPU utilisation, 0 to 1.
    pub cpu: f64,
    /// Average reserved memory utilisation, 0 to 1.
    pub memory: f64,
    /// Pods running and ready.
    pub ready_pods: usize,
    /// Nodes draining.
    pub draining: usize,
}

/// The price of an instance type in a zone and capacity type, USD an hour.
pub type Prices = BTreeMap<(String, String, String), f64>;

fn quantity(value: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i64 {
    value
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0, Quantity::milli_ceil)
}

fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

/// A pod's CPU and memory requests (milli-units): its containers', or its largest init
/// container's where larger.
fn requests(pod: &Pod) -> (i64, i64) {
    let Some(spec) = &pod.spec else {
        return (0, 0);
    };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        (
            quantity(r.and_then(|r| r.get("cpu"))),
            quantity(r.and_then(|r| r.get("memory"))),
        )
    };
    let (mut cpu, mut memory) = spec
        .containers
        .iter()
        .map(of)
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    for init in spec.init_containers.iter().flatten() {
        let (c, m) = of(init);
        cpu = cpu.max(c);
        memory = memory.max(m);
    }
    (cpu, memory)
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Running with `Ready=True`, not being deleted.
pub fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Whether a node is on its way out.
pub fn draining(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == labels::DISRUPTED_TAINT))
}

/// The figures of `nodes` (Karpenter's only) running `pods` of the workload.
pub fn figures(nodes: &[Node], pods: &[Pod], prices: &Prices) -> Figures {
    let ours: Vec<&Node> = nodes
        .iter()
        .filter(|n| !label(n, labels::NODEPOOL).is_empty())
        .collect();
    let mut used: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !finished(p)) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            let (c, m) = requests(pod);
            let entry = used.entry(node).or_default();
            entry.0 += c;
            entry.1 += m;
        }
    }
    let mut figures = Figures {
        nodes: ours.len(),
        ready_pods: pods.iter().filter(|p| ready(p)).count(),
        draining: ours.iter().filter(|n| draining(n)).count(),
        ..Figures::default()
    };
    let (mut cpu, mut memory) = (0.0, 0.0);
    for node in &ours {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let total_cpu = quantity(allocatable.and_then(|a| a.get("cpu")));
        let total_memory = quantity(allocatable.and_then(|a| a.get("memory")));
        let (c, m) = used.get(name).copied().unwrap_or_default();
        if total_cpu > 0 {
            cpu += c as f64 / total_cpu as f64;
        }
        if total_memory > 0 {
            memory += m as f64 / total_memory as f64;
        }
        let key = (
            label(node, labels::INSTANCE_TYPE).to_owned(),
            label(node, labels::ZONE).to_owned(),
            label(node, labels::CAPACITY_TYPE).to_owned(),
        );
        figures.cost += prices.get(&key).copied().unwrap_or(0.0);
    }
    if !ours.is_empty() {
        figures.cpu = cpu / ours.len() as f64;
        figures.memory = memory / ours.len() as f64;
    }
    figures
}

/// The sum of each series of counter `name` in Prometheus text, keyed by the values of
/// `keys` (in that order); other labels summed over.
pub fn counters(text: &str, name: &str, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => match rest.split_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let pairs: BTreeMap<&str, &str> = labels
            .split(',')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k.trim(), v.trim().trim_matches('"')))
            })
            .collect();
        let key = keys
            .iter()
            .map(|k| pairs.get(k).copied().unwrap_or("").to_owned())
            .collect();
        *out.entry(key).or_default() += value;
    }
    out
}

/// The 95th percentile of `samples` (nearest rank), 0 when there are none.
pub fn p95(samples: &[u64]) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 95).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, cpu: &str, memory: &str, disrupted: bool) -> Node {
        let taints = if disrupted {
            json!([{"key": labels::DISRUPTED_TAINT, "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                labels::NODEPOOL: "default", labels::INSTANCE_TYPE: "m5.large",
                labels::ZONE: "us-west-2a", labels::CAPACITY_TYPE: "on-demand",
            }},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}},
        }))
        .unwrap()
    }

    fn pod(node: &str, cpu: &str, memory: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    #[test]
    fn utilisation_is_each_nodes_requests_over_allocatable_averaged() {
        let nodes = [node("a", "2", "8Gi", false), node("b", "4", "8Gi", true)];
        let pods = [pod("a", "2", "4Gi"), pod("b", "1", "2Gi")];
        let prices = Prices::from([(
            ("m5.large".into(), "us-west-2a".into(), "on-demand".into()),
            0.096,
        )]);
        let f = figures(&nodes, &pods, &prices);
        assert_eq!(f.nodes, 2);
        assert!((f.cpu - (1.0 + 0.25) / 2.0).abs() < 1e-9, "{f:?}");
        assert!((f.memory - (0.5 + 0.25) / 2.0).abs() < 1e-9, "{f:?}");
        assert!((f.cost - 0.192).abs() < 1e-9);
        assert_eq!((f.ready_pods, f.draining), (2, 1));
    }

    #[test]
    fn counters_sum_series_by_the_labels_asked_for() {
        let text = "# HELP x\napiserver_request_total{code=\"200\",resource=\"pods\",verb=\"list\"} 3\n\
                    apiserver_request_total{code=\"500\",resource=\"pods\",verb=\"list\"} 2\n\
                    apiserver_request_total{code=\"201\",resource=\"nodes\",verb=\"create\"} 1\n\
                    apiserver_request_total_other 9\n";
        let by = counters(text, "apiserver_request_total", &["verb", "resource"]);
        assert_eq!(by[&vec!["list".to_owned(), "pods".to_owned()]], 5.0);
        assert_eq!(by.len(), 2);
        assert_eq!(p95(&[5, 1, 3, 2, 4]), 5);
        assert_eq!(p95(&(1..=100).collect::<Vec<_>>()), 95);
    }
}
