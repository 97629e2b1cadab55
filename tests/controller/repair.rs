//! Node repair on a running controller (gate NodeRepair): a simulated node told that its
//! kubelet stopped heartbeating is marked `Unknown` by the API server's node lifecycle
//! stand-in, then replaced.

use super::*;

/// Upstream's "should delete nodes that are unhealthy by the cloud provider", end to end:
/// the kubelet stops, its Lease goes stale, the node lifecycle controller marks the Node
/// `Ready=Unknown`, and once the toleration passes the NodeClaim is deleted forcefully and a
/// new node launched for its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_kubelet_stops_heartbeating_is_repaired() {
    let options = karpenter_test_apiserver::Options {
        node_monitor_grace_period: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    let mut h = Harness::start_on(
        json!({"metadata": {"name": "default"}, "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}]
        }}),
        options,
    )
    .await;
    h.run_with("kube-e2e-repair", |o| {
        o.settings.node_repair = true;
        // Seconds instead of AWS's 30 minutes.
        o.settings.repair_toleration = Some(Duration::from_secs(2));
        o.settings.disruption_poll = Duration::from_secs(1);
    });
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let (claim, node) = ready_node(&h).await;

    // `kubectl annotate node <node> karpenter-rs/kubelet=stopped`.
    h.nodes()
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"karpenter-rs/kubelet": "stopped"}}}),
            ),
        )
        .await
        .unwrap();
    eventually(
        "the node lifecycle stand-in to mark the Node Unknown",
        40,
        || async {
            let n = h.nodes().get(&node).await.ok()?;
            let conditions = n.status?.conditions?;
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown")
                .then_some(())
        },
    )
    .await;
    // Repaired: the NodeClaim and its Node go, and a new node serves the pod.
    eventually("the unhealthy NodeClaim to be gone", 60, || async {
        h.nodeclaims()
            .get_opt(&claim)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("its Node to be gone", 30, || async {
        h.nodes().get_opt(&node).await.ok()?.is_none().then_some(())
    })
    .await;
    eventually("a new Ready NodeClaim", 60, || async {
        let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
        claims
            .iter()
            .any(|c| {
                c.metadata.name.as_deref() != Some(claim.as_str())
                    && condition(c, "Ready").as_deref() == Some("True")
            })
            .then_some(())
    })
    .await;
    h.stop().await;
}
