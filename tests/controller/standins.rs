//! What the rest of a cluster does, played by the campaigns: a ReplicaSet (keeps the wanted
//! number of `web` pods: a new pending pod for each one gone), kube-scheduler (binds pending
//! pods to the Ready node they tolerate, select and fit with the most CPU left, host ports
//! included: [`admits`]) and, on EC2, the
//! kubelets (a Node for each launched NodeClaim, Ready with the NodeClaim's capacity). Every
//! call tolerates the API server failing it: what did not happen is done on the next pass,
//! as the real controllers retry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::api::NodeClaim;
use karpenter_core::model::quantity::Quantity;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The ReplicaSet (`wanted` web pods), kube-scheduler and the kubelets, played every 250 ms
/// beside a campaign until stopped.
pub(super) struct Player {
    /// How many web pods the ReplicaSet keeps.
    pub(super) wanted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Player {
    pub(super) fn start(h: Arc<super::Harness>, wanted: usize) -> Player {
        let wanted = Arc::new(AtomicUsize::new(wanted));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (wanted, stop) = (wanted.clone(), stop.clone());
            tokio::spawn(async move {
                let created = AtomicUsize::new(0);
                while !stop.load(Ordering::SeqCst) {
                    register_nodes(&h.client).await;
                    schedule_and_replicate(&h.client, wanted.load(Ordering::SeqCst), &created)
                        .await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Player { wanted, stop, task }
    }

    /// Stops after the pass under way.
    pub(super) async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
    }
}

/// Milli-units of a resource in a resource list (CPU in millicores, memory in millibytes).
pub fn millis(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
) -> i64 {
    list.and_then(|l| l.get(name))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0, Quantity::milli_ceil)
}

/// A pod's requests: (CPU, memory) in milli-units.
pub fn requests(pod: &Pod) -> (i64, i64) {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers.iter().fold((0, 0), |(cpu, mem), c| {
                let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                (cpu + millis(r, "cpu"), mem + millis(r, "memory"))
            })
        })
        .unwrap_or_default()
}

/// Whether a pod tolerates every taint of a node that keeps pods off.
pub fn tolerates(pod: &Pod, node: &Node) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect != "PreferNoSchedule")
        .all(|taint| {
            tolerations.iter().any(|t| {
                let exists = t.operator.as_deref() == Some("Exists");
                // An empty key with Exists tolerates every taint.
                let key = t.key.as_deref().unwrap_or_default();
                (key == taint.key || (key.is_empty() && exists))
                    && (exists || t.value.as_deref() == taint.value.as_deref())
                    && t.effect
                        .as_deref()
                        .is_none_or(|e| e.is_empty() || e == taint.effect)
            })
        })
}

/// Whether kube-scheduler's filters besides resources let `pod` onto `node`: its taints
/// (TaintToleration), the pod's node selector and required node affinity (NodeAffinity; a
/// pod selecting a restricted label such as another node's hostname finds no node), and its
/// host ports against those of the pods bound there and of the DaemonSets' pods that run
/// there (NodePorts).
pub fn admits(pod: &Pod, node: &Node, there: &[&Pod], daemonsets: &[DaemonSet]) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if !tolerates(pod, node) || !selects(pod, &labels) {
        return false;
    }
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return true;
    }
    let daemons = daemon_pods(daemonsets, node);
    there
        .iter()
        .copied()
        .chain(daemons.iter())
        .flat_map(host_ports)
        .all(|taken| !wanted.iter().any(|w| ports_clash(w, &taken)))
}

/// A DaemonSet's pod on `node`, for each DaemonSet that runs there.
fn daemon_pods(daemonsets: &[DaemonSet], node: &Node) -> Vec<Pod> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    daemonsets
        .iter()
        .filter_map(|ds| {
            let template = ds.spec.as_ref()?.template.clone();
            Some(Pod {
                metadata: template.metadata.unwrap_or_default(),
                spec: template.spec,
                status: None,
            })
        })
        .filter(|pod| tolerates(pod, node) && selects(pod, &labels))
        .collect()
}

/// A pod's node selector and required node affinity hold for a node with `labels`.
fn selects(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else {
        return true;
    };
    let selector_holds = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.clone());
    selector_holds
        && terms.is_none_or(|terms| {
            terms.iter().any(|term| {
                term.match_expressions
                    .iter()
                    .flatten()
                    .all(|e| expression_holds(e, labels))
            })
        })
}

fn expression_holds(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&e.key);
    let values = e.values.clone().unwrap_or_default();
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<i64>().ok());
    let bound = number(values.first());
    match e.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((number(value), bound), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((number(value), bound), (Some(v), Some(b)) if v < b),
        _ => false,
    }
}

/// A pod's host ports: (port, protocol, host IP).
fn host_ports(pod: &Pod) -> Vec<(i32, String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            Some((port, protocol, p.host_ip.clone().unwrap_or_default()))
        })
        .collect()
}

/// Two host ports clash on one node: same port and protocol, and the same address or either
/// on every address.
fn ports_clash(a: &(i32, String, String), b: &(i32, String, String)) -> bool {
    let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
    a.0 == b.0 && a.1 == b.1 && (a.2 == b.2 || any(&a.2) || any(&b.2))
}

/// Ready and not cordoned.
pub fn schedulable(node: &Node) -> bool {
    !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn unschedulable_marked(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
        })
}

/// The kubelets of EC2 instances: a Ready Node for each launched NodeClaim that has none,
/// with its labels and taints (and `karpenter.sh/unregistered`, for the controller to lift).
pub async fn register_nodes(client: &Client) {
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let (Ok(claims), Ok(existing)) = (
        claims.list(&Default::default()).await,
        nodes.list(&Default::default()).await,
    ) else {
        return;
    };
    let registered: BTreeMap<String, bool> = existing
        .items
        .iter()
        .filter_map(|n| Some((n.spec.as_ref()?.provider_id.clone()?, ready(n))))
        .collect();
    for claim in &claims.items {
        let Some(status) = &claim.status else {
            continue;
        };
        let Some(provider_id) = &status.provider_id else {
            continue;
        };
        if status.allocatable.is_empty() || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let instance = provider_id.rsplit('/').next().unwrap_or_default();
        let name = format!(
            "ip-{}.us-west-2.compute.internal",
            instance.trim_start_matches("i-")
        );
        if !registered.contains_key(provider_id) {
            let mut labels = claim.metadata.labels.clone().unwrap_or_default();
            labels.insert("kubernetes.io/hostname".into(), name.clone());
            labels.insert("kubernetes.io/os".into(), "linux".into());
            labels.insert("kubernetes.io/arch".into(), "amd64".into());
            let mut taints: Vec<serde_json::Value> = claim
                .spec
                .taints
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect();
            taints.push(json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"}));
            let node = json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": provider_id, "taints": taints}
            });
            let Ok(node) = serde_json::from_value::<Node>(node) else {
                continue;
            };
            if nodes.create(&PostParams::default(), &node).await.is_err() {
                continue;
            }
        } else if registered.get(provider_id) == Some(&true) {
            continue;
        }
        let status = json!({"status": {
            "capacity": status.capacity, "allocatable": status.allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        }});
        let _ = nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await;
    }
}

/// kube-scheduler and the ReplicaSet, one pass: `wanted` live `web` pods (new ones pending,
/// marked Unschedulable), each pending one bound where it fits and started.
pub async fn schedule_and_replicate(client: &Client, wanted: usize, created: &AtomicUsize) {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let daemonsets: Api<DaemonSet> = Api::all(client.clone());
    let (Ok(nodes_now), Ok(pods_now), Ok(daemonsets)) = (
        nodes.list(&Default::default()).await,
        pods.list(&ListParams::default().labels("app=web")).await,
        daemonsets.list(&Default::default()).await,
    ) else {
        return;
    };
    let mut there: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in &pods_now.items {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            there.entry(node).or_default().push(pod.clone());
        }
    }
    // What each schedulable node has left: (CPU, memory) in milli-units.
    let mut free: BTreeMap<String, (i64, i64)> = nodes_now
        .items
        .iter()
        .filter(|n| schedulable(n) && n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let allocatable = n.status.as_ref()?.allocatable.as_ref();
            let left = (millis(allocatable, "cpu"), millis(allocatable, "memory"));
            Some((n.metadata.name.clone()?, left))
        })
        .collect();
    for pod in &pods_now.items {
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
        if let Some(left) = bound.and_then(|n| free.get_mut(n)) {
            let (cpu, mem) = requests(pod);
            *left = (left.0 - cpu, left.1 - mem);
        }
    }
    let mut live: usize = 0;
    for pod in &pods_now.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        live += 1;
        let name = pod.metadata.name.clone().unwrap_or_default();
        if pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
                start(&pods, &name).await;
            }
            continue;
        }
        // As kube-scheduler's default scoring (least allocated): of the nodes it tolerates
        // and fits, the one with the most CPU left.
        let (cpu, mem) = requests(pod);
        let target = nodes_now
            .items
            .iter()
            .filter(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let on: Vec<&Pod> = there.get(&name).into_iter().flatten().collect();
                admits(pod, n, &on, &daemonsets.items)
            })
            .filter_map(|n| n.metadata.name.as_deref())
            .filter_map(|n| Some((n, *free.get(n)?)))
            .filter(|(_, (c, m))| *c >= cpu && *m >= mem)
            .max_by_key(|(_, (c, _))| *c)
            .map(|(n, _)| n.to_owned());
        let Some(node) = target else {
            if !unschedulable_marked(pod) {
                mark_unschedulable(&pods, &name).await;
            }
            continue;
        };
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let bound: Result<serde_json::Value, _> = pods
            .create_subresource("binding", &name, &PostParams::default(), &binding)
            .await;
        if bound.is_ok() {
            if let Some(left) = free.get_mut(&node) {
                *left = (left.0 - cpu, left.1 - mem);
            }
            there.entry(node.clone()).or_default().push(pod.clone());
            start(&pods, &name).await;
        }
    }
    // Scaled down: the newest pods go, pending ones first.
    let mut surplus: Vec<&Pod> = pods_now
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    surplus.sort_by_key(|p| {
        (
            p.spec.as_ref().is_some_and(|s| s.node_name.is_some()),
            std::cmp::Reverse(p.metadata.creation_timestamp.clone()),
        )
    });
    for pod in surplus.into_iter().take(live.saturating_sub(wanted)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let _ = pods.delete(&name, &Default::default()).await;
    }
    for _ in live..wanted {
        let n = created.fetch_add(1, Ordering::SeqCst);
        let name = format!("web-{n}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
            }
        }))
        .unwrap_or_default();
        if pods.create(&PostParams::default(), &pod).await.is_ok() {
            mark_unschedulable(&pods, &name).await;
        }
    }
}

async fn mark_unschedulable(pods: &Api<Pod>, name: &str) {
    let status = json!({"status": {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/0 nodes are available"
    }]}});
    let _ = pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}

async fn start(pods: &Api<Pod>, name: &str) {
    let started = json!({"status": {"phase": "Running", "podIP": "192.168.0.9",
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}});
    let _ = pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&started))
        .await;
}

/// A PodDisruptionBudget for the `web` pods: at most `max_unavailable` of them disrupted.
pub async fn web_budget(client: &Client, max_unavailable: i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb = json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": "web"}}}});
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(pdb).expect("a PodDisruptionBudget"),
    )
    .await
    .expect("the PodDisruptionBudget created");
}

/// The NodeClaim whose Node runs the most `web` pods.
pub async fn busiest_claim(client: &Client) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .ok()?
        .items;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        if let Some(node) = pod.spec.and_then(|s| s.node_name) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let node = per_node.into_iter().max_by_key(|(_, n)| *n)?.0;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claims = claims.list(&Default::default()).await.ok()?.items;
    claims
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .and_then(|c| c.metadata.name)
}

/// Live pods bound to no Ready node.
pub fn pending(nodes: &[Node], pods: &[Pod]) -> usize {
    let ready_nodes: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| ready(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| ready_nodes.contains(n))
        })
        .count()
}
