//! A NodeClaim's life on the controller, against the in-memory API server through a real
//! `kube::Client`: a pending pod gets a NodeClaim whose Node registers and initializes;
//! deleting it drains the Node under PodDisruptionBudgets and the termination grace period,
//! and the instance goes only once its volumes have detached.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_gets_a_nodeclaim_whose_node_registers_and_initializes() {
    let h = Harness::start("kube-e2e-provision").await;
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;

    let claim = eventually("a NodeClaim object", 30, || async {
        h.nodeclaims()
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    let meta = &claim.metadata;
    assert!(meta.name.as_deref().unwrap().starts_with("general-"));
    assert_eq!(
        meta.finalizers.as_deref().unwrap(),
        ["karpenter.sh/termination"]
    );
    let owner = &meta.owner_references.as_deref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("NodePool", "general")
    );
    assert!(
        !owner.uid.is_empty(),
        "the owner reference carries the NodePool's uid"
    );
    let claim_labels = meta.labels.as_ref().unwrap();
    assert_eq!(claim_labels["karpenter.sh/nodepool"], "general");
    assert_eq!(claim_labels["team"], "web");
    assert!(
        meta.annotations
            .as_ref()
            .unwrap()
            .contains_key("karpenter.sh/nodepool-hash")
    );
    let name = meta.name.clone().unwrap();

    // The simulated instance's Node joins and is synced with the NodeClaim.
    let (claim, node) = eventually("the Node to register and initialize", 30, || async {
        let claim = h.nodeclaims().get(&name).await.ok()?;
        let node_name = claim.status.as_ref()?.node_name.clone()?;
        let node = h.nodes().get(&node_name).await.ok()?;
        let initialized = node
            .metadata
            .labels
            .as_ref()?
            .get("karpenter.sh/initialized")
            .is_some_and(|v| v == "true");
        (initialized && condition(&claim, "Ready").as_deref() == Some("True"))
            .then_some((claim, node))
    })
    .await;
    let status = claim.status.as_ref().unwrap();
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id,
        status.provider_id,
        "matched by provider id"
    );
    for c in ["Launched", "Registered", "Initialized", "Ready"] {
        assert_eq!(condition(&claim, c).as_deref(), Some("True"), "{c}");
    }
    assert!(status.allocatable.contains_key("cpu"));
    let node_labels = node.metadata.labels.as_ref().unwrap();
    assert_eq!(node_labels["karpenter.sh/registered"], "true");
    assert_eq!(node_labels["team"], "web");
    assert_eq!(node_labels["karpenter.sh/nodepool"], "general");
    assert_eq!(node_labels["karpenter.sh/capacity-type"], "on-demand");
    let taints = node
        .spec
        .as_ref()
        .unwrap()
        .taints
        .clone()
        .unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/unregistered"),
        "{taints:?}"
    );
    assert!(
        taints
            .iter()
            .any(|t| t.key == "dedicated" && t.value.as_deref() == Some("web"))
    );
    assert_eq!(
        node.metadata.finalizers.as_deref().unwrap(),
        ["karpenter.sh/termination"]
    );
    let node_owner = &node.metadata.owner_references.as_deref().unwrap()[0];
    assert_eq!(
        (node_owner.kind.as_str(), node_owner.name.as_str()),
        ("NodeClaim", name.as_str())
    );

    // The NodePool reports its node, that its nodes register, and the (simulated)
    // EC2NodeClass is Ready.
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let pool_status = eventually("the NodePool status", 30, || async {
        let status = pools.get("general").await.ok()?.status?;
        let registering = status
            .conditions
            .iter()
            .any(|c| c.type_ == "NodeRegistrationHealthy" && c.status == "True");
        (status.nodes == Some(1) && registering).then_some(status)
    })
    .await;
    assert!(pool_status.resources.contains_key("cpu"));
    assert!(
        pool_status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // The pod fits: bind it as kube-scheduler would.
    let allocatable = node.status.as_ref().unwrap().allocatable.as_ref().unwrap();
    assert!(allocatable.contains_key("cpu") && allocatable.contains_key("memory"));
    let node_name = node.metadata.name.clone().unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}});
    let _: serde_json::Value = h
        .pods()
        .create_subresource("binding", "web-1", &PostParams::default(), &binding)
        .await
        .unwrap();

    // The NodePool's template changes: the NodeClaim is marked Drifted.
    let relabel = json!({"spec": {"template": {"metadata": {"labels": {"team": "api"}}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let drifted = eventually("the NodeClaim Drifted", 30, || async {
        let claim = h.nodeclaims().get(&name).await.ok()?;
        claim
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Drifted" && c.status == "True")
    })
    .await;
    assert_eq!(drifted.reason, "NodePoolDrifted");

    // Deleting the NodeClaim drains the node (the pod is evicted), deletes it and lets go.
    h.nodeclaims()
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually("the NodeClaim and its Node to be gone", 30, || async {
        let claim_gone = h.nodeclaims().get_opt(&name).await.ok()?.is_none();
        let node_gone = h.nodes().get_opt(&node_name).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    assert!(
        h.pods().get_opt("web-1").await.unwrap().is_none(),
        "the pod was evicted"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_the_pod_disruption_budget() {
    let h = Harness::start("kube-e2e-pdb").await;
    h.unschedulable_pod("db-1", json!({"app": "db"})).await;
    let (claim, node) = ready_node(&h).await;
    bind(&h, "db-1", &node).await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(h.client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    h.nodeclaims()
        .delete(&claim, &Default::default())
        .await
        .unwrap();
    // Cordoned and tainted, the eviction refused and said so; nothing is deleted meanwhile.
    eventually(
        "the node to be cordoned and the block reported",
        30,
        || async {
            let n = h.nodes().get(&node).await.ok()?;
            let spec = n.spec?;
            let tainted = spec
                .taints
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule");
            let events: Api<k8s_openapi::api::events::v1::Event> =
                Api::namespaced(h.client.clone(), "default");
            let blocked = events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("DisruptionBlocked"));
            (spec.unschedulable == Some(true) && tainted && blocked).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        h.pods().get_opt("db-1").await.unwrap().is_some(),
        "the budget holds the pod"
    );
    let held = h.nodeclaims().get(&claim).await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(condition(&held, "Drained").as_deref(), Some("False"));
    assert!(h.nodes().get_opt(&node).await.unwrap().is_some());

    // The budget allows one disruption: the drain finishes.
    let relaxed = json!({"spec": {"maxUnavailable": 1}});
    pdbs.patch("db", &PatchParams::default(), &Patch::Merge(&relaxed))
        .await
        .unwrap();
    eventually("the drain to finish", 30, || async {
        let claim_gone = h.nodeclaims().get_opt(&claim).await.ok()?.is_none();
        let node_gone = h.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    assert!(h.pods().get_opt("db-1").await.unwrap().is_none());
    h.stop().await;
}

/// A Node that is not Karpenter's (a node group's), Ready, with room for a few pods.
async fn static_node(h: &Harness, name: &str) {
    let node = json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"
    }}});
    let capacity = json!({
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
        "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"}
    });
    node_reports_ready(h, node, capacity).await;
}

/// What a ReplicaSet controller, kube-scheduler and the kubelet of `node` do together for
/// the pods labelled `app=<app>`: each pod being deleted gets a replacement, bound to
/// `node` and started there. Returns the fewest healthy pods seen while it ran.
fn replica_set(h: &Harness, app: &str, node: &str) -> (oneshot::Sender<()>, JoinHandle<usize>) {
    let pods = h.pods();
    let (app, node) = (app.to_owned(), node.to_owned());
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut replaced = std::collections::BTreeSet::new();
        let mut fewest = usize::MAX;
        let selector = kube::api::ListParams::default().labels(&format!("app={app}"));
        while stopped.try_recv().is_err() {
            let Ok(list) = pods.list(&selector).await else {
                continue;
            };
            fewest = fewest.min(list.items.iter().filter(|p| healthy(p)).count());
            for pod in &list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if pod.metadata.deletion_timestamp.is_none() || !replaced.insert(name.clone()) {
                    continue;
                }
                let mut spec = pod.spec.clone().unwrap_or_default();
                spec.node_name = Some(node.clone());
                let replacement: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-r"), "namespace": "default",
                        "labels": {"app": app}},
                    "spec": spec
                }))
                .unwrap();
                pods.create(&PostParams::default(), &replacement)
                    .await
                    .unwrap();
                let started = json!({"status": {"phase": "Running", "podIP": "192.168.0.9",
                    "conditions": [{"type": "Ready", "status": "True"}]}});
                pods.patch_status(
                    &format!("{name}-r"),
                    &PatchParams::default(),
                    &Patch::Merge(&started),
                )
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fewest
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodeclaim_goes_once_its_pods_have_moved_under_their_budget() {
    let h = Harness::start("kube-e2e-move").await;
    for i in 0..3 {
        h.unschedulable_pod(&format!("web-{i}"), json!({"app": "web"}))
            .await;
    }
    let (claim, node) = ready_node(&h).await;
    for i in 0..3 {
        bind(&h, &format!("web-{i}"), &node).await;
    }
    // The simulated node's kubelet starts them: Running and Ready, with a pod IP.
    eventually("the pods to start on the simulated node", 30, || async {
        let pods = h.pods().list(&Default::default()).await.ok()?.items;
        let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
        (pods
            .iter()
            .filter(|p| healthy(p) && ip(p).is_some())
            .count()
            == 3)
            .then_some(())
    })
    .await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(h.client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    static_node(&h, "group-node-1").await;
    let (stop, replicas) = replica_set(&h, "web", "group-node-1");

    let deleted = tokio::time::Instant::now();
    h.nodeclaims()
        .delete(&claim, &Default::default())
        .await
        .unwrap();
    eventually("the NodeClaim and its Node to go", 30, || async {
        let claim_gone = h.nodeclaims().get_opt(&claim).await.ok()?.is_none();
        let node_gone = h.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    let took = deleted.elapsed();
    eprintln!("the NodeClaim went {took:?} after its deletion");
    let _ = stop.send(());
    let fewest = replicas.await.unwrap();
    // Evicted pods are finished by the simulated kubelet once their 2 s grace period ends.
    assert!(
        took < Duration::from_secs(2 + 6),
        "the NodeClaim went {took:?} after its deletion"
    );
    assert!(fewest >= 2, "the budget kept 2 pods healthy, saw {fewest}");
    let pods = h.pods().list(&Default::default()).await.unwrap().items;
    let names: Vec<_> = pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["web-0-r", "web-1-r", "web-2-r"]);
    assert!(pods.iter().all(healthy));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_goes_only_after_its_volumes_detach() {
    let h = Harness::start("kube-e2e-volumes").await;
    h.unschedulable_pod("db-1", json!({"app": "db"})).await;
    let (claim, node) = ready_node(&h).await;
    let attachments: Api<k8s_openapi::api::storage::v1::VolumeAttachment> =
        Api::all(h.client.clone());
    let attachment = serde_json::from_value(json!({
        "metadata": {"name": "csi-1"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": {"persistentVolumeName": "pv-1"}}
    }))
    .unwrap();
    attachments
        .create(&PostParams::default(), &attachment)
        .await
        .unwrap();
    h.nodeclaims()
        .delete(&claim, &Default::default())
        .await
        .unwrap();
    eventually("the wait to be reported", 30, || async {
        (events_with_reason(&h.client, "default", "AwaitingVolumeDetachment").await > 0)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        h.nodes().get_opt(&node).await.unwrap().is_some(),
        "not while attached"
    );
    assert!(h.nodeclaims().get_opt(&claim).await.unwrap().is_some());
    attachments
        .delete("csi-1", &Default::default())
        .await
        .unwrap();
    eventually("the NodeClaim and Node to go once detached", 30, || async {
        let gone = h.nodeclaims().get_opt(&claim).await.ok()?.is_none()
            && h.nodes().get_opt(&node).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_termination_grace_period_bounds_the_drain() {
    let h = Harness::start("kube-e2e-grace").await;
    h.grace_period("3s").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.unschedulable_pod("batch-1", json!({"app": "batch"}))
        .await;
    let (claim, node) = ready_node(&h).await;
    let stored = h.nodeclaims().get(&claim).await.unwrap();
    assert_eq!(
        stored.spec.termination_grace_period.map(|d| d.0),
        Some(Duration::from_secs(3))
    );
    bind(&h, "batch-1", &node).await;
    h.do_not_disrupt("batch-1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deleted_at = tokio::time::Instant::now();
    h.nodeclaims()
        .delete(&claim, &Default::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        h.nodeclaims().get_opt(&claim).await.unwrap().is_some(),
        "the do-not-disrupt pod holds the drain within the grace period"
    );
    eventually("the grace period to end the drain", 30, || async {
        h.nodeclaims()
            .get_opt(&claim)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // Counted from the deletionTimestamp, which has whole seconds, as upstream counts it.
    assert!(deleted_at.elapsed() >= Duration::from_secs(2));
    assert!(events_with_reason(&h.client, "default", "TerminationGracePeriodExpiring").await > 0);
    h.stop().await;
}
