//! Watches that break and leaders that change: a watch broken mid-stream resumes without
//! planning a NodeClaim twice, and only the leader acts until a follower takes over.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_broken_mid_stream_resume_without_duplicate_nodeclaims() {
    let h = Harness::start("kube-e2e-watch").await;
    for i in 0..3 {
        h.unschedulable_pod(&format!("web-{i}"), json!({"app": "web"}))
            .await;
    }
    eventually("a NodeClaim", 30, || async {
        let n = h
            .nodeclaims()
            .list(&Default::default())
            .await
            .ok()?
            .items
            .len();
        (n > 0).then_some(())
    })
    .await;
    // Break every watch, twice, with the history they would resume from compacted away:
    // each relists (410 Gone) while NodeClaims launch and Nodes register.
    for _ in 0..2 {
        h.server.compact();
        h.server.disconnect_watches();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let planned_pods = |claims: &[NodeClaim]| -> i64 {
        claims
            .iter()
            .filter_map(|c| c.spec.resources.as_ref()?.requests.get("pods"))
            .map(|q| q.0.parse::<i64>().unwrap())
            .sum()
    };
    let claims = eventually("every NodeClaim Ready", 30, || async {
        let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
        claims
            .iter()
            .all(|c| condition(c, "Ready").as_deref() == Some("True"))
            .then_some(claims)
    })
    .await;
    assert_eq!(planned_pods(&claims), 3, "each pod planned once");
    // Nothing more happens: no pod is planned again after the relists.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(after.len(), claims.len());
    assert_eq!(
        h.nodes()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        claims.len()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_acts_and_a_follower_takes_over_when_it_goes() {
    let h = Harness::start_without_controller().await;
    let election = || {
        Some(LeaderElection {
            namespace: "kube-system".into(),
            name: "karpenter-leader-election".into(),
            timing: Timing {
                lease_duration: Duration::from_secs(2),
                renew_deadline: Duration::from_millis(1500),
                retry_period: Duration::from_millis(200),
            },
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let (stop_a, a) = spawn_controller(&h.client, dir.path(), "kube-e2e-leader-a", "a", election());
    eventually("a to lead", 20, || async {
        (lease_holder(&h.client).await.as_deref() == Some("a")).then_some(())
    })
    .await;
    let (stop_b, b) = spawn_controller(&h.client, dir.path(), "kube-e2e-leader-b", "b", election());

    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let (first, _) = ready_node(&h).await;
    // b keeps its caches warm but does not act: still one NodeClaim, still a's lease.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        h.nodeclaims()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(lease_holder(&h.client).await.as_deref(), Some("a"));

    // a stops (releasing the lease): b leads, finds a's NodeClaim without an instance in
    // its cloud, finalizes it, and provisions the still-pending pod anew.
    shut_down(stop_a, a).await;
    eventually("b to lead", 20, || async {
        (lease_holder(&h.client).await.as_deref() == Some("b")).then_some(())
    })
    .await;
    let second = eventually("b's NodeClaim Ready, a's gone", 30, || async {
        let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
        match &claims[..] {
            [only]
                if only.metadata.name.as_ref() != Some(&first)
                    && condition(only, "Ready").as_deref() == Some("True") =>
            {
                only.metadata.name.clone()
            }
            _ => None,
        }
    })
    .await;
    assert_ne!(first, second);
    let claims = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1, "a's NodeClaim was finalized, b made one");

    // b loses the lease to someone else: it stops acting at once.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(h.client.clone(), "kube-system");
    let mut lease = leases.get("karpenter-leader-election").await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("c".into());
    leases
        .replace("karpenter-leader-election", &PostParams::default(), &lease)
        .await
        .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .unwrap();
    assert_eq!(stopped.unwrap().unwrap(), Stopped::LeadershipLost);
    drop(stop_b);
    h.stop().await;
}
