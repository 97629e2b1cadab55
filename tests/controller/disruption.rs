//! Nodes leave as safely as they arrive: a Deployment scaled down leaves empty nodes that the
//! disruption controller removes, and a NodePool template change drifts its nodes, which are
//! replaced one at a time within a `nodes: "1"` budget, each replacement Ready before the
//! old node drains.

use std::collections::{BTreeMap, BTreeSet};

use super::pending::KubeScheduler;
use super::*;

/// A controller whose disruption controller looks every second.
fn disrupting(h: &mut Harness, scope: &str) {
    h.run_with(scope, |o| {
        o.settings.disruption_enabled = true;
        o.settings.disruption_poll = Duration::from_secs(1);
        o.settings.pending_retry = Duration::from_secs(1);
    });
}

/// What a ReplicaSet controller does for the pods labelled `app=<app>`: each pod being
/// deleted (evicted) gets a pending replacement, which kube-scheduler could not place yet.
/// Stopped when dropped.
struct ReplicaSet(JoinHandle<()>);

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ReplicaSet {
    fn start(h: &Harness, app: &str) -> ReplicaSet {
        let pods = h.pods();
        let selector = kube::api::ListParams::default().labels(&format!("app={app}"));
        ReplicaSet(tokio::spawn(async move {
            let mut replaced = BTreeSet::new();
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Ok(list) = pods.list(&selector).await else {
                    continue;
                };
                for pod in list.items {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if pod.metadata.deletion_timestamp.is_none() || !replaced.insert(name.clone()) {
                        continue;
                    }
                    let mut spec = pod.spec.clone().unwrap_or_default();
                    spec.node_name = None;
                    let replacement: Pod = serde_json::from_value(json!({
                        "metadata": {"name": format!("{name}-r"), "namespace": "default",
                            "labels": pod.metadata.labels},
                        "spec": spec
                    }))
                    .unwrap();
                    let _ = pods.create(&PostParams::default(), &replacement).await;
                    let status = json!({"status": {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/1 nodes are available"
                    }]}});
                    let _ = pods
                        .patch_status(
                            &format!("{name}-r"),
                            &PatchParams::default(),
                            &Patch::Merge(&status),
                        )
                        .await;
                }
            }
        }))
    }
}

/// A web pod of `cpu` that tolerates the pool's taint, pending.
async fn web_pod(h: &Harness, name: &str, cpu: &str) {
    h.pending_pod(
        name,
        json!({"app": "web"}),
        json!({
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
        }),
    )
    .await;
}

/// The web pods not being deleted, with the node each is bound to (if any) and whether it
/// runs.
async fn web_pods(h: &Harness) -> Vec<(String, Option<String>, bool)> {
    let selector = kube::api::ListParams::default().labels("app=web");
    h.pods()
        .list(&selector)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let running = healthy(&p);
            let node = p.spec.and_then(|s| s.node_name);
            (p.metadata.name.unwrap_or_default(), node, running)
        })
        .collect()
}

/// NodeClaims whose Ready condition is True, by name, with their node.
async fn ready_claims(h: &Harness) -> BTreeMap<String, String> {
    h.nodeclaims()
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| condition(c, "Ready").as_deref() == Some("True"))
        .filter_map(|c| {
            let node = c.status.as_ref()?.node_name.clone()?;
            Some((c.metadata.name.clone()?, node))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_scaled_down_leaves_empty_nodes_that_are_removed() {
    let mut h = Harness::start_without_controller().await;
    disrupting(&mut h, "kube-e2e-empty");
    let _scheduler = KubeScheduler::start(&h);
    web_pod(&h, "web-0", "500m").await;
    web_pod(&h, "web-1", "500m").await;
    let claims = eventually("the pods running on Ready nodes", 30, || async {
        let claims = ready_claims(&h).await;
        let pods = web_pods(&h).await;
        let nodes: BTreeSet<&String> = claims.values().collect();
        (!claims.is_empty()
            && pods.len() == 2
            && pods
                .iter()
                .all(|(_, n, running)| *running && n.as_ref().is_some_and(|n| nodes.contains(n))))
        .then_some(claims)
    })
    .await;
    // consolidateAfter is 0s: the nodes are consolidatable, but not empty.
    for claim in claims.keys() {
        eventually("the NodeClaim Consolidatable", 30, || async {
            let c = h.nodeclaims().get(claim).await.ok()?;
            (condition(&c, "Consolidatable").as_deref() == Some("True")).then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ready_claims(&h).await,
        claims,
        "nodes with pods are not empty"
    );

    // The Deployment scales to zero: the empty nodes go, with their NodeClaims.
    for pod in ["web-0", "web-1"] {
        h.pods().delete(pod, &Default::default()).await.unwrap();
    }
    eventually("the empty nodes and their NodeClaims to go", 30, || async {
        for (claim, node) in &claims {
            if h.nodeclaims().get_opt(claim).await.ok()?.is_some()
                || h.nodes().get_opt(node).await.ok()?.is_some()
            {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(events_with_reason(&h.client, "default", "DisruptionTerminating").await >= 1);
    assert!(
        h.nodeclaims()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "nothing replaced them"
    );
    h.stop().await;
}

/// What the test watched while nodes were replaced.
#[derive(Debug, Default)]
struct Watched {
    /// The most old nodes disrupted (tainted or cordoned) at once.
    most_disrupted: usize,
    /// Each old node whose drain began (cordoned), with the replacements Ready then.
    drains: Vec<(String, usize)>,
}

/// Watches the old nodes every 100 ms until stopped.
fn watch_old_nodes(
    h: &Harness,
    old: BTreeMap<String, String>,
) -> (oneshot::Sender<()>, JoinHandle<Watched>) {
    let nodes = h.nodes();
    let claims = h.nodeclaims();
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut watched = Watched::default();
        let old_nodes: BTreeSet<String> = old.values().cloned().collect();
        while stopped.try_recv().is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (Ok(node_list), Ok(claim_list)) = (
                nodes.list(&Default::default()).await,
                claims.list(&Default::default()).await,
            ) else {
                continue;
            };
            let ready_new = claim_list
                .items
                .iter()
                .filter(|c| !old.contains_key(c.metadata.name.as_deref().unwrap_or_default()))
                .filter(|c| condition(c, "Ready").as_deref() == Some("True"))
                .count();
            let mut disrupted = 0;
            for node in &node_list.items {
                let name = node.metadata.name.clone().unwrap_or_default();
                if !old_nodes.contains(&name) {
                    continue;
                }
                let spec = node.spec.as_ref();
                let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
                let tainted = spec
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"));
                if cordoned || tainted {
                    disrupted += 1;
                }
                if cordoned && !watched.drains.iter().any(|(n, _)| *n == name) {
                    watched.drains.push((name, ready_new));
                }
            }
            watched.most_disrupted = watched.most_disrupted.max(disrupted);
        }
        watched
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_replaces_nodes_one_at_a_time_within_a_budget_of_one() {
    let mut h = Harness::start_without_controller().await;
    // One web pod per node (1.2 of a 2-vCPU type's cores), and one node disrupted at a time.
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let narrow = json!({"spec": {
        "template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
        ]}},
        "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}
    }});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&narrow))
        .await
        .unwrap();
    disrupting(&mut h, "kube-e2e-drift");
    let _scheduler = KubeScheduler::start(&h);
    let _replicas = ReplicaSet::start(&h, "web");
    web_pod(&h, "web-0", "1200m").await;
    web_pod(&h, "web-1", "1200m").await;
    let old = eventually("two Ready nodes, each running a web pod", 60, || async {
        let claims = ready_claims(&h).await;
        let pods = web_pods(&h).await;
        let on: BTreeSet<String> = pods.iter().filter_map(|(_, n, _)| n.clone()).collect();
        (claims.len() == 2
            && pods.len() == 2
            && pods.iter().all(|(_, _, running)| *running)
            && claims.values().all(|n| on.contains(n)))
        .then_some(claims)
    })
    .await;
    let (stop, watcher) = watch_old_nodes(&h, old.clone());

    let relabel = json!({"spec": {"template": {"metadata": {"labels": {"team": "api"}}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let new = eventually(
        "both nodes replaced, the pods running on the new ones",
        120,
        || async {
            let claims = ready_claims(&h).await;
            if claims.keys().any(|c| old.contains_key(c)) || claims.len() != 2 {
                return None;
            }
            let pods = web_pods(&h).await;
            let on: BTreeSet<String> = pods.iter().filter_map(|(_, n, _)| n.clone()).collect();
            (pods.len() == 2
                && pods.iter().all(|(_, _, running)| *running)
                && claims.values().all(|n| on.contains(n)))
            .then_some(claims)
        },
    )
    .await;
    let _ = stop.send(());
    let watched = watcher.await.unwrap();
    eprintln!("watched: {watched:?}");
    assert_eq!(
        watched.most_disrupted, 1,
        "one old node disrupted at a time: {watched:?}"
    );
    assert_eq!(watched.drains.len(), 2, "{watched:?}");
    for (i, (node, ready_new)) in watched.drains.iter().enumerate() {
        assert!(
            *ready_new > i,
            "node {node} began to drain with {ready_new} replacement(s) Ready: {watched:?}"
        );
    }
    for claim in new.keys() {
        let c = h.nodeclaims().get(claim).await.unwrap();
        assert_eq!(condition(&c, "Drifted"), None, "{claim} is not drifted");
        assert_eq!(
            c.metadata.labels.as_ref().unwrap()["team"],
            "api",
            "{claim} has the new template"
        );
    }
    assert!(events_with_reason(&h.client, "default", "DisruptionLaunching").await >= 2);
    assert!(events_with_reason(&h.client, "default", "DisruptionTerminating").await >= 2);
    h.stop().await;
}
