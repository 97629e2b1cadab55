//! Pending pods are served until they bind: a pod created before the only NodePool that can
//! serve it is provisioned once that pool exists, and a pod kube-scheduler's stand-in
//! displaces from the node planned for it (it binds another pod there) gets a node elsewhere.

use std::collections::BTreeMap;

use karpenter_core::events::DomainEvent;
use karpenter_journal::Journal;

use k8s_openapi::api::apps::v1::DaemonSet;

use super::standins::{admits, millis, requests, schedulable};
use super::*;

/// kube-scheduler's stand-in: every 200 ms it binds each pending pod, largest CPU request
/// first, to the first Ready, schedulable Node (by name) that [`admits`] it (taints, node
/// selector and affinity, host ports) and whose allocatable CPU and memory still hold its
/// requests. Pods that fit nowhere stay pending. It
/// knows nothing of nominations, as kube-scheduler does not. Stopped when dropped.
pub(super) struct KubeScheduler(JoinHandle<()>);

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl KubeScheduler {
    pub(super) fn start(h: &Harness) -> KubeScheduler {
        let (pods, nodes, client) = (h.pods(), h.nodes(), h.client.clone());
        let daemonsets: Api<DaemonSet> = Api::all(client.clone());
        KubeScheduler(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (Ok(all), Ok(nodes), Ok(daemonsets)) = (
                    pods.list(&Default::default()).await,
                    nodes.list(&Default::default()).await,
                    daemonsets.list(&Default::default()).await,
                ) else {
                    continue;
                };
                let mut used: BTreeMap<String, (i64, i64)> = BTreeMap::new();
                let mut there: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
                let mut waiting = Vec::new();
                for pod in all.items {
                    if pod.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                        Some(node) => {
                            let (cpu, mem) = requests(&pod);
                            let entry = used.entry(node.clone()).or_default();
                            *entry = (entry.0 + cpu, entry.1 + mem);
                            there.entry(node).or_default().push(pod);
                        }
                        None => waiting.push(pod),
                    }
                }
                waiting.sort_by_key(|p| std::cmp::Reverse(requests(p).0));
                let mut nodes = nodes.items;
                nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                for pod in waiting {
                    let (cpu, mem) = requests(&pod);
                    let target = nodes.iter().find(|node| {
                        let name = node.metadata.name.clone().unwrap_or_default();
                        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
                        let (used_cpu, used_mem) = used.get(&name).copied().unwrap_or_default();
                        let on: Vec<&Pod> = there.get(&name).into_iter().flatten().collect();
                        schedulable(node)
                            && admits(&pod, node, &on, &daemonsets.items)
                            && used_cpu + cpu <= millis(allocatable, "cpu")
                            && used_mem + mem <= millis(allocatable, "memory")
                    });
                    let Some(node) = target.and_then(|n| n.metadata.name.clone()) else {
                        continue;
                    };
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                    let namespaced: Api<Pod> = Api::namespaced(client.clone(), "default");
                    let bound: Result<serde_json::Value, _> = namespaced
                        .create_subresource("binding", &name, &PostParams::default(), &binding)
                        .await;
                    if bound.is_ok() {
                        let entry = used.entry(node.clone()).or_default();
                        *entry = (entry.0 + cpu, entry.1 + mem);
                        there.entry(node).or_default().push(pod);
                    }
                }
            }
        }))
    }
}

/// The node a pod is bound to, once it is.
async fn bound_node(h: &Harness, pod: &str, seconds: u64) -> String {
    eventually(&format!("pod {pod} bound"), seconds, || async {
        h.pods().get(pod).await.ok()?.spec?.node_name
    })
    .await
}

/// The events a stopped controller journaled.
fn journaled(dir: &std::path::Path) -> Vec<DomainEvent> {
    let journal: Journal<DomainEvent> = Journal::open(dir.join("journal-test")).unwrap();
    journal.read_from(0).map(|e| e.unwrap().event).collect()
}

/// A controller that retries pending pods every second and lets nominations expire after
/// two, so the tests see several retries within their patience.
fn impatient(h: &mut Harness, scope: &str) {
    h.run_with(scope, |o| {
        o.settings.pending_retry = Duration::from_secs(1);
        o.settings.nomination_window = Duration::from_secs(2);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_created_before_its_nodepool_is_provisioned_once_the_pool_exists() {
    let mut h = Harness::start_without_controller().await;
    // Only the `late` NodePool, not there yet, can serve it.
    h.late_pod("early-1").await;
    impatient(&mut h, "kube-e2e-early");
    // A round looks at it and finds no NodePool for it.
    eventually("the pod reported unschedulable", 30, || async {
        (events_with_reason(&h.client, "default", "FailedScheduling").await > 0).then_some(())
    })
    .await;
    assert!(h.claims_of("late").await.is_empty());
    create_karpenter_object(
        &h.client,
        "karpenter.sh",
        "NodePool",
        late_pool(json!({"team": "red"})),
    )
    .await;
    let _scheduler = KubeScheduler::start(&h);
    let node = bound_node(&h, "early-1", 30).await;
    let claims = h.claims_of("late").await;
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0]
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref()),
        Some(node.as_str())
    );
    let uid = h.pods().get("early-1").await.unwrap().metadata.uid.unwrap();
    let journal = std::mem::replace(&mut h._journal, tempfile::tempdir().unwrap());
    h.stop().await;
    // The journal tells why it waited, then how it was served.
    let events = journaled(journal.path());
    let waited = events.iter().position(|e| {
        matches!(e, DomainEvent::RoundCompleted(r) if r.unschedulable.iter().any(|(p, _)| *p == uid))
    });
    let planned = events.iter().position(|e| {
        matches!(e, DomainEvent::NodeClaimPlanned(p) if p.nodepool == "late" && p.pods.contains(&uid))
    });
    assert!(
        matches!((waited, planned), (Some(w), Some(p)) if w < p),
        "{waited:?} {planned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_displaced_from_its_planned_node_gets_a_node_elsewhere() {
    let mut h = Harness::start_without_controller().await;
    impatient(&mut h, "kube-e2e-displaced");
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let (planned, node) = ready_node(&h).await;
    // kube-scheduler has its own mind: a larger pod arrives and it binds that one to the new
    // node first, leaving no room for the pod the node was planned for.
    let allocatable = h
        .nodes()
        .get(&node)
        .await
        .unwrap()
        .status
        .unwrap()
        .allocatable;
    let cpu = millis(allocatable.as_ref(), "cpu");
    h.pods()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "hog", "namespace": "default"},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "app", "image": "nginx",
                        "resources": {"requests": {"cpu": format!("{}m", cpu - 100)}}}],
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let _scheduler = KubeScheduler::start(&h);
    assert_eq!(bound_node(&h, "hog", 30).await, node);
    // The displaced pod's nomination expires; the next round buys it a node of its own.
    let elsewhere = bound_node(&h, "web-1", 60).await;
    assert_ne!(elsewhere, node);
    let claims = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 2, "one more NodeClaim, not one per retry");
    let journal = std::mem::replace(&mut h._journal, tempfile::tempdir().unwrap());
    h.stop().await;
    let expired: Vec<DomainEvent> = journaled(journal.path())
        .into_iter()
        .filter(|e| matches!(e, DomainEvent::NominationExpired { .. }))
        .collect();
    assert!(
        expired.iter().any(|e| matches!(
            e,
            DomainEvent::NominationExpired { nodeclaim, node: n, .. } if *nodeclaim == planned && *n == node
        )),
        "{expired:?}"
    );
}

/// A NodePool `name` on EC2NodeClass `class`, tainted `name=true:NoSchedule` so only the
/// pods [`pool_pod`] makes for it land there, with `requirements` besides on-demand.
fn tainted_pool(name: &str, class: &str, requirements: serde_json::Value) -> serde_json::Value {
    let mut all = vec![
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
    ];
    all.extend(requirements.as_array().cloned().unwrap_or_default());
    json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
        "requirements": all,
        "taints": [{"key": name, "value": "true", "effect": "NoSchedule"}]
    }}}})
}

/// A pending 500m pod for the NodePool `pool`, with `extra` laid over its spec.
async fn pool_pod(h: &Harness, name: &str, pool: &str, extra: serde_json::Value) {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "500m"}}}],
        "nodeSelector": {"karpenter.sh/nodepool": pool},
        "tolerations": [{"key": pool, "operator": "Exists", "effect": "NoSchedule"}]
    });
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        match (spec.get_mut(&key), value) {
            (Some(serde_json::Value::Object(mine)), serde_json::Value::Object(theirs)) => {
                mine.extend(theirs)
            }
            (_, value) => spec[key.as_str()] = value,
        }
    }
    h.pending_pod(name, json!({}), spec).await;
}

/// The notes of the Events about pod `name` with `reason`.
async fn pod_event_notes(h: &Harness, name: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(h.client.clone(), "default");
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_labels_restricted_selectors_and_daemonset_ports_are_served_as_upstream_serves_them()
{
    let mut h = Harness::start_without_controller().await;
    create_karpenter_object(
        &h.client,
        "karpenter.sh",
        "NodePool",
        tainted_pool(
            "custom",
            "default",
            json!([
                {"key": "test-key-3", "operator": "NotIn", "values": ["x"]},
                {"key": "test-key-4", "operator": "Exists"},
                {"key": "test-key-5", "operator": "Gt", "values": ["5"]},
                {"key": "test-key-6", "operator": "Lt", "values": ["10"]}
            ]),
        ),
    )
    .await;
    // Its pod holds hostPort 8080 on every node.
    let daemonsets: Api<DaemonSet> = Api::namespaced(h.client.clone(), "default");
    let proxy = json!({"metadata": {"name": "proxy", "namespace": "default"}, "spec": {
        "selector": {"matchLabels": {"app": "proxy"}},
        "template": {"metadata": {"labels": {"app": "proxy"}}, "spec": {
            "containers": [{"name": "proxy", "image": "envoy",
                "resources": {"requests": {"cpu": "100m"}},
                "ports": [{"containerPort": 8080, "hostPort": 8080}]}],
            "tolerations": [{"operator": "Exists"}]
        }}
    }});
    daemonsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(proxy).unwrap(),
        )
        .await
        .unwrap();
    let affinity = |expressions: serde_json::Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}})
    };
    pool_pod(
        &h,
        "affine",
        "custom",
        affinity(json!([
            {"key": "test-key-4", "operator": "Exists"},
            {"key": "test-key-5", "operator": "Gt", "values": ["3"]},
            {"key": "test-key-3", "operator": "Exists"}
        ])),
    )
    .await;
    pool_pod(&h, "plain", "custom", json!({})).await;
    pool_pod(
        &h,
        "red",
        "custom",
        json!({"nodeSelector": {"kubernetes.io/hostname": "red-node"}}),
    )
    .await;
    let clash = json!({"containers": [{"name": "app", "image": "nginx",
        "resources": {"requests": {"cpu": "100m"}},
        "ports": [{"containerPort": 8080, "hostPort": 8080}]}]});
    pool_pod(&h, "clash", "custom", clash).await;
    impatient(&mut h, "kube-e2e-upstream-pods");
    let _scheduler = KubeScheduler::start(&h);

    // A node of the pool carries a value for each custom requirement, so the pod selecting
    // them binds, and the pod beside the one selecting a restricted label is served.
    let node = bound_node(&h, "affine", 60).await;
    let labels = h.nodes().get(&node).await.unwrap().metadata.labels.unwrap();
    let number = |key: &str| labels.get(key).and_then(|v| v.parse::<i64>().ok());
    assert!(
        labels.get("test-key-3").is_some_and(|v| v != "x"),
        "{labels:?}"
    );
    assert!(labels.contains_key("test-key-4"), "{labels:?}");
    assert!(number("test-key-5").is_some_and(|v| v > 5), "{labels:?}");
    assert!(number("test-key-6").is_some_and(|v| v < 10), "{labels:?}");
    bound_node(&h, "plain", 30).await;

    // The pod selecting a hostname and the one needing the DaemonSet's port get no node, and
    // no NodeClaim is bought for them, however often they are retried.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for pod in ["red", "clash"] {
        let spec = h.pods().get(pod).await.unwrap().spec.unwrap();
        assert_eq!(spec.node_name, None, "{pod} bound");
    }
    let claims = h.claims_of("custom").await;
    assert_eq!(claims.len(), 1, "{claims:#?}");
    assert!(
        claims[0]
            .spec
            .requirements
            .iter()
            .all(|r| r.key != "kubernetes.io/hostname")
    );
    let red = pod_event_notes(&h, "red", "FailedScheduling").await;
    assert!(
        red.iter().any(|n| n.contains("kubernetes.io/hostname")),
        "{red:?}"
    );
    let clash = pod_event_notes(&h, "clash", "FailedScheduling").await;
    assert!(
        clash.iter().any(|n| n.contains("host port 8080")),
        "{clash:?}"
    );
    assert!(pod_event_notes(&h, "clash", "Nominated").await.is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodepool_whose_node_class_is_missing_is_provisioned_for_once_the_class_exists() {
    let mut h = Harness::start_without_controller().await;
    create_karpenter_object(
        &h.client,
        "karpenter.sh",
        "NodePool",
        tainted_pool("orphan", "later", json!([])),
    )
    .await;
    pool_pod(&h, "waiting", "orphan", json!({})).await;
    impatient(&mut h, "kube-e2e-missing-class");
    eventually("the pod reported unschedulable", 30, || async {
        let notes = pod_event_notes(&h, "waiting", "FailedScheduling").await;
        (!notes.is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(h.claims_of("orphan").await.is_empty());
    create_karpenter_object(
        &h.client,
        "karpenter.k8s.aws",
        "EC2NodeClass",
        json!({"metadata": {"name": "later"}, "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}]
        }}),
    )
    .await;
    eventually("a NodeClaim of the pool", 30, || async {
        h.claims_of("orphan").await.into_iter().next()
    })
    .await;
    h.stop().await;
}
