//! A kube-scheduler stand-in ([`crate::Controllers::scheduler`]): each pass binds the pending
//! pods (no `nodeName`, not being deleted, the default scheduler's), highest priority first
//! then oldest, each to the node kube-scheduler's default profile would pick among those its
//! filters let through:
//!
//! - the node is `Ready` and not cordoned; the pod tolerates its `NoSchedule` and `NoExecute`
//!   taints (TaintToleration);
//! - the pod's `nodeSelector` and required node affinity hold for its labels (NodeAffinity);
//! - its requests fit what is left of the node's allocatable once the requests of the pods
//!   bound there (not finished) are taken, `pods` counted as one each (NodeResourcesFit; a
//!   pod's requests are its containers' summed, or its largest init container's if larger,
//!   plus its overhead);
//! - its `DoNotSchedule` topology spread constraints keep their skew on the domains of the
//!   nodes that pass the filters above (PodTopologySpread), and no pod its required
//!   anti-affinity names runs in the node's domain (InterPodAffinity).
//!
//! Among those it picks the least allocated node (NodeResourcesFit's default
//! `LeastAllocated` score on CPU and memory, ties to the first by name). A pod no node takes
//! gets `PodScheduled=False`, reason `Unschedulable`, as kube-scheduler reports it (which is
//! what makes an autoscaler look at it). Not done: preemption, required pod affinity,
//! `ScheduleAnyway` constraints and other scores, volumes, host ports, scheduling gates and
//! nominated nodes.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::{NODES, PODS};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{PatchKind, PatchRequest, RequestOptions, Store};

/// A resource amount in thousandths of its unit (CPU in millicores, memory in millibytes).
fn milli(quantity: &Value) -> Option<i128> {
    let text = match quantity {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let scale: i128 = 10i128.pow(fraction.len() as u32);
    let value: i128 = format!("{whole}{fraction}").parse().ok()?;
    const K: i128 = 1000;
    const KI: i128 = 1024;
    let factor: i128 = match suffix {
        "" => K,
        "m" => 1,
        "k" => K * K,
        "M" => K * K * K,
        "G" => K * K * K * K,
        "T" => K * K * K * K * K,
        "Ki" => K * KI,
        "Mi" => K * KI * KI,
        "Gi" => K * KI * KI * KI,
        "Ti" => K * KI * KI * KI * KI,
        _ => return None,
    };
    Some(value * factor / scale)
}

/// Amounts by resource name.
type Amounts = BTreeMap<String, i128>;

fn add(into: &mut Amounts, from: &Value) {
    for (name, quantity) in from.as_object().into_iter().flatten() {
        *into.entry(name.clone()).or_default() += milli(quantity).unwrap_or(0);
    }
}

/// What a pod asks for: its containers' requests summed, or its largest init container's
/// where larger, plus its overhead; `pods` is one.
pub(crate) fn requests(pod: &Value) -> Amounts {
    let spec = &pod["spec"];
    let mut total = Amounts::new();
    for container in spec["containers"].as_array().into_iter().flatten() {
        add(&mut total, &container["resources"]["requests"]);
    }
    for init in spec["initContainers"].as_array().into_iter().flatten() {
        let mut one = Amounts::new();
        add(&mut one, &init["resources"]["requests"]);
        for (name, amount) in one {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(amount);
        }
    }
    add(&mut total, &spec["overhead"]);
    total.insert("pods".into(), 1000);
    total
}

/// A node as the scheduler weighs it.
struct Candidate {
    name: String,
    node: Value,
    free: Amounts,
    allocatable: Amounts,
}

fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    }) && node["spec"]["unschedulable"] != json!(true)
}

fn tolerated(pod: &Value, node: &Value) -> bool {
    let tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|taint| {
            let effect = taint["effect"].as_str().unwrap_or("");
            effect == "PreferNoSchedule"
                || tolerations.iter().any(|t| {
                    let key_ok = t["key"]
                        .as_str()
                        .is_none_or(|k| k.is_empty() || taint["key"] == k);
                    let exists = t["operator"] == "Exists";
                    let value_ok = exists
                        || t["value"].as_str().unwrap_or("")
                            == taint["value"].as_str().unwrap_or("");
                    let effect_ok = t["effect"]
                        .as_str()
                        .is_none_or(|e| e.is_empty() || e == effect);
                    let any_key = t["key"].as_str().is_none_or(str::is_empty);
                    (key_ok && value_ok && effect_ok) && (!any_key || exists)
                })
        })
}

fn expression_holds(e: &Value, labels: &Value) -> bool {
    let key = e["key"].as_str().unwrap_or("");
    let value = labels.get(key).and_then(Value::as_str);
    let values: Vec<&str> = e["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let number = |s: &str| s.parse::<i64>().ok();
    match e["operator"].as_str().unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

fn selects(pod: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let selector_ok = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let terms = pod["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array();
    let affinity_ok = terms.is_none_or(|terms| {
        terms.iter().any(|term| {
            term["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|e| expression_holds(e, labels))
        })
    });
    selector_ok && affinity_ok
}

fn fits(wanted: &Amounts, free: &Amounts) -> bool {
    wanted
        .iter()
        .all(|(name, amount)| *amount <= 0 || free.get(name).is_some_and(|f| f >= amount))
}

/// Where pods run: (node, labels) of each bound, unfinished pod.
struct Placed {
    by_node: BTreeMap<String, Vec<Value>>,
}

impl Placed {
    /// Pods matching `selector` in `namespace` on nodes whose `key` label is `domain`.
    fn count(
        &self,
        nodes: &[Candidate],
        key: &str,
        domain: &str,
        namespace: &str,
        selector: &LabelSelector,
    ) -> usize {
        nodes
            .iter()
            .filter(|n| n.node["metadata"]["labels"][key].as_str() == Some(domain))
            .flat_map(|n| self.by_node.get(&n.name).into_iter().flatten())
            .filter(|p| {
                p["metadata"]["namespace"].as_str() == Some(namespace) && selector.matches(p)
            })
            .count()
    }
}

/// Whether the pod's `DoNotSchedule` spread constraints and required anti-affinity let it
/// onto `node`, with `eligible` the nodes that passed the other filters.
fn spread_ok(
    pod: &Value,
    node: &Candidate,
    eligible: &[&Candidate],
    all: &[Candidate],
    placed: &Placed,
) -> bool {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    for constraint in pod["spec"]["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if constraint["whenUnsatisfiable"] != "DoNotSchedule" {
            continue;
        }
        let key = constraint["topologyKey"].as_str().unwrap_or("");
        let Some(selector) = LabelSelector::from_object(&constraint["labelSelector"]) else {
            continue;
        };
        let max_skew = constraint["maxSkew"].as_u64().unwrap_or(1) as usize;
        let Some(domain) = node.node["metadata"]["labels"][key].as_str() else {
            return false;
        };
        let mut domains: Vec<&str> = eligible
            .iter()
            .filter_map(|n| n.node["metadata"]["labels"][key].as_str())
            .collect();
        domains.sort_unstable();
        domains.dedup();
        let min = domains
            .iter()
            .map(|d| placed.count(all, key, d, namespace, &selector))
            .min()
            .unwrap_or(0);
        if placed.count(all, key, domain, namespace, &selector) + 1 > min + max_skew {
            return false;
        }
    }
    let anti = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array();
    for term in anti.into_iter().flatten() {
        let key = term["topologyKey"].as_str().unwrap_or("");
        let Some(selector) = LabelSelector::from_object(&term["labelSelector"]) else {
            continue;
        };
        let Some(domain) = node.node["metadata"]["labels"][key].as_str() else {
            continue;
        };
        if placed.count(all, key, domain, namespace, &selector) > 0 {
            return false;
        }
    }
    true
}

/// The least allocated share of CPU and memory left after placing `wanted`, in [0, 1].
fn score(node: &Candidate, wanted: &Amounts) -> f64 {
    let share = |name: &str| {
        let total = *node.allocatable.get(name).unwrap_or(&0);
        if total <= 0 {
            return 0.0;
        }
        let left =
            node.free.get(name).copied().unwrap_or(0) - wanted.get(name).copied().unwrap_or(0);
        left as f64 / total as f64
    };
    (share("cpu") + share("memory")) / 2.0
}

fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// One pass: binds what fits, marks the rest unschedulable. Returns how many were bound.
pub fn pass(store: &mut Store) -> usize {
    let everything = (LabelSelector::default(), FieldSelector::default());
    let all_pods: Vec<Value> = store
        .list(PODS, None, &everything.0, &everything.1, None)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let mut nodes: Vec<Candidate> = store
        .in_namespace(NODES, "")
        .into_iter()
        .filter(ready)
        .map(|node| {
            let mut allocatable = Amounts::new();
            add(&mut allocatable, &node["status"]["allocatable"]);
            Candidate {
                name: node["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                free: allocatable.clone(),
                allocatable,
                node,
            }
        })
        .collect();
    let index: BTreeMap<String, usize> = (nodes.iter().enumerate())
        .map(|(i, c)| (c.name.clone(), i))
        .collect();
    let mut placed = Placed {
        by_node: BTreeMap::new(),
    };
    let mut pending = Vec::new();
    for pod in all_pods {
        if finished(&pod) {
            continue;
        }
        match pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            Some(node) => {
                if let Some(c) = index.get(node).map(|&i| &mut nodes[i]) {
                    for (name, amount) in requests(&pod) {
                        *c.free.entry(name).or_default() -= amount;
                    }
                }
                placed.by_node.entry(node.to_owned()).or_default().push(pod);
            }
            None if pod["metadata"].get("deletionTimestamp").is_none()
                && pod["spec"]["schedulerName"]
                    .as_str()
                    .is_none_or(|s| s == "default-scheduler") =>
            {
                pending.push(pod)
            }
            None => {}
        }
    }
    pending.sort_by(|a, b| {
        let priority = |p: &Value| p["spec"]["priority"].as_i64().unwrap_or(0);
        let created = |p: &Value| {
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        };
        priority(b)
            .cmp(&priority(a))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| {
                a["metadata"]["name"]
                    .as_str()
                    .cmp(&b["metadata"]["name"].as_str())
            })
    });
    let mut bound = 0;
    for pod in pending {
        let wanted = requests(&pod);
        let passing: Vec<usize> = (0..nodes.len())
            .filter(|&i| tolerated(&pod, &nodes[i].node) && selects(&pod, &nodes[i].node))
            .collect();
        // Borrowed, not copied: a pass looks at every node for every pending pod.
        let eligible: Vec<&Candidate> = passing.iter().map(|&i| &nodes[i]).collect();
        let best = passing
            .iter()
            .copied()
            .filter(|&i| fits(&wanted, &nodes[i].free))
            .filter(|&i| spread_ok(&pod, &nodes[i], &eligible, &nodes, &placed))
            .max_by(|&a, &b| {
                score(&nodes[a], &wanted)
                    .total_cmp(&score(&nodes[b], &wanted))
                    .then_with(|| nodes[b].name.cmp(&nodes[a].name))
            });
        let namespace = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let Some(index) = best else {
            mark_unschedulable(store, &pod, &namespace, &name, nodes.len());
            continue;
        };
        let node = nodes[index].name.clone();
        let patch = json!({"spec": {"nodeName": node}});
        let scheduled =
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
        let written = store
            .patch(PODS, &namespace, &name, &merge(&patch, false))
            .and_then(|_| store.patch(PODS, &namespace, &name, &merge(&scheduled, true)));
        if let Err(error) = written {
            tracing::debug!(pod = %name, %error, "scheduler stand-in: binding failed");
            continue;
        }
        for (resource, amount) in wanted {
            *nodes[index].free.entry(resource).or_default() -= amount;
        }
        placed.by_node.entry(node).or_default().push(pod);
        bound += 1;
    }
    bound
}

fn merge(body: &Value, status: bool) -> PatchRequest<'_> {
    PatchRequest {
        kind: PatchKind::Merge,
        body,
        manager: None,
        status,
        options: RequestOptions::default(),
    }
}

/// `PodScheduled=False`, reason `Unschedulable`, unless the pod says so already.
fn mark_unschedulable(store: &mut Store, pod: &Value, namespace: &str, name: &str, nodes: usize) {
    let marked = pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
    });
    if marked {
        return;
    }
    let condition = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": format!("0/{nodes} nodes are available: no node fits the pod's requests, taints, affinity and spread."),
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}});
    if let Err(error) = store.patch(PODS, namespace, name, &merge(&condition, true)) {
        tracing::debug!(pod = %name, %error, "scheduler stand-in: marking the pod unschedulable failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_writes_them() {
        assert_eq!(milli(&json!("950m")), Some(950));
        assert_eq!(milli(&json!("2")), Some(2000));
        assert_eq!(milli(&json!(1.5)), Some(1500));
        assert_eq!(milli(&json!("3900Mi")), Some(3900 * 1024 * 1024 * 1000));
        assert_eq!(milli(&json!("1.5Gi")), Some(1536 * 1024 * 1024 * 1000));
        assert_eq!(milli(&json!("1k")), Some(1_000_000));
        assert_eq!(milli(&json!("lots")), None);
    }

    #[test]
    fn a_pod_asks_for_its_containers_or_its_largest_init_container() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"memory": "100Mi"}
        }});
        let r = requests(&pod);
        assert_eq!(r["cpu"], 2000);
        assert_eq!(r["memory"], (1024 + 100) * 1024 * 1024 * 1000);
        assert_eq!(r["pods"], 1000);
    }

    #[test]
    fn taints_and_affinity_filter_nodes() {
        let node = json!({"metadata": {"labels": {"zone": "a", "cpu": "8"}}, "spec": {"taints": [
            {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"}
        ]}});
        let plain = json!({"spec": {}});
        let tolerating = json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web"}]}});
        let everything = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert!(!tolerated(&plain, &node));
        assert!(tolerated(&tolerating, &node));
        assert!(tolerated(&everything, &node));
        let gt = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["4"]}]}]
        }}}}});
        let lt = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "cpu", "operator": "Lt", "values": ["4"]}]}]
        }}}}});
        assert!(selects(&gt, &node) && !selects(&lt, &node));
        assert!(!selects(
            &json!({"spec": {"nodeSelector": {"zone": "b"}}}),
            &node
        ));
    }
}
