//! NodePools on a running controller: created, changed and deleted while it runs; a static
//! pool scaled through its scale subresource; a pool whose nodes never register made
//! unhealthy.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodepools_created_changed_and_deleted_while_running_take_effect() {
    let h = Harness::start("kube-e2e-pools").await;
    // Created after the controller started.
    create_karpenter_object(
        &h.client,
        "karpenter.sh",
        "NodePool",
        late_pool(json!({"team": "red"})),
    )
    .await;
    h.late_pod("late-1").await;
    let first = eventually("a NodeClaim of the new pool", 30, || async {
        h.claims_of("late").await.into_iter().next()
    })
    .await;
    assert_eq!(first.metadata.labels.as_ref().unwrap()["team"], "red");

    // Changed: the next NodeClaim carries the new template.
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let change = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    pools
        .patch("late", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.late_pod("late-2").await;
    eventually("a NodeClaim with the changed template", 30, || async {
        h.claims_of("late")
            .await
            .into_iter()
            .find(|c| c.metadata.labels.as_ref().unwrap()["team"] == "blue")
    })
    .await;

    // Deleted: its NodeClaims go with it (owner references), and nothing new is planned.
    pools.delete("late", &Default::default()).await.unwrap();
    eventually("the pool's NodeClaims to be gone", 30, || async {
        h.claims_of("late").await.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.late_pod("late-3").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        h.claims_of("late").await.is_empty(),
        "no NodeClaim for a deleted pool"
    );
    h.stop().await;
}

/// A NodePool condition's status, reason and message.
async fn pool_condition(h: &Harness, pool: &str, type_: &str) -> Option<(String, String, String)> {
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let pool = pools.get(pool).await.ok()?;
    pool.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// The late pool's NodeClaims that are Ready with a Node.
async fn ready_claims(h: &Harness) -> usize {
    h.claims_of("late")
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
        })
        .filter(|c| condition(c, "Ready").as_deref() == Some("True"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pool_keeps_its_replicas_as_kubectl_scale_sets_them() {
    let mut h = Harness::start_without_controller().await;
    h.run_with("kube-e2e-static", |o| o.settings.static_capacity = true);
    // A static NodePool (upstream's `replicas`, gate StaticCapacity): its nodes are launched
    // with no pod pending, and it is not reported as a field not acted on.
    let mut fixed = late_pool(json!({"team": "fixed"}));
    fixed["spec"]["replicas"] = json!(2);
    fixed["spec"]["limits"] = json!({"nodes": "6"});
    create_karpenter_object(&h.client, "karpenter.sh", "NodePool", fixed).await;
    eventually("2 Ready nodes of the static pool", 60, || async {
        (ready_claims(&h).await == 2).then_some(())
    })
    .await;
    assert_eq!(pool_condition(&h, "late", "UnsupportedFields").await, None);

    // `kubectl scale nodepool/late --replicas=4`: a merge patch of the scale subresource.
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let scale = pools
        .patch_scale(
            "late",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(4));
    eventually("4 Ready nodes of the static pool", 60, || async {
        (ready_claims(&h).await == 4).then_some(())
    })
    .await;
    // status.nodes is the scale subresource's status.replicas.
    eventually("the scale's status to count 4 nodes", 30, || async {
        let scale = pools.get_scale("late").await.ok()?;
        (scale.status?.replicas == 4).then_some(())
    })
    .await;

    // Down to 1: the excess is deleted (outside budgets, as upstream).
    pools
        .patch_scale(
            "late",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("the static pool down to 1 NodeClaim", 60, || async {
        (h.claims_of("late").await.len() == 1).then_some(())
    })
    .await;
    assert_eq!(ready_claims(&h).await, 1);

    // A static pool may limit only its node count: the API server refuses the rest.
    let refused = pools
        .patch(
            "late",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"limits": {"cpu": "100"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("only 'limits.nodes' is supported on static NodePools"),
        "{refused}"
    );

    // A pool cannot become static: upstream's transition rule, enforced by the API server
    // on the object and on its scale subresource alike.
    let refused = pools
        .patch(
            "general",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    let by_scale = pools
        .patch_scale(
            "general",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    for refused in [refused, by_scale] {
        assert!(
            refused
                .to_string()
                .contains("Cannot transition NodePool between static (replicas set) and dynamic"),
            "{refused}"
        );
    }

    // Balanced consolidation is acted on: not reported, and the pool provisions.
    let balanced = json!({"spec": {"disruption": {"consolidationPolicy": "Balanced", "consolidateAfter": "30s"}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&balanced))
        .await
        .unwrap();
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    eventually("a NodeClaim of the Balanced pool", 30, || async {
        h.claims_of("general").await.into_iter().next()
    })
    .await;
    // The pending pod is never provisioned for in the static pool.
    assert_eq!(h.claims_of("late").await.len(), 1);
    assert_eq!(
        pool_condition(&h, "general", "UnsupportedFields").await,
        None,
        "Balanced is not reported"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_never_register_make_the_nodepool_unhealthy() {
    let h = Harness::start_without_controller().await;
    let dir = tempfile::tempdir().unwrap();
    // Instances whose Nodes would take an hour: every registration times out.
    let cloud = ControllerCloud::Sim {
        region: "us-west-2".into(),
        boot_delay: Duration::from_secs(3600),
        kubelets: Default::default(),
    };
    let (stop, controller) = spawn_controller_with(
        &h.client,
        dir.path(),
        "kube-e2e-unhealthy",
        "u",
        None,
        cloud,
        |o| o.settings.registration_timeout = Duration::from_millis(500),
    );
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let condition = eventually("NodeRegistrationHealthy=False", 30, || async {
        let status = pools.get("general").await.ok()?.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "NodeRegistrationHealthy" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "RegistrationFailed");
    assert!(
        condition.message.contains("registration_timeout"),
        "{}",
        condition.message
    );
    shut_down(stop, controller).await;
    h.server.stop().await;
}

/// With the `NodeOverlay` gate on, NodeOverlays reprice the offerings the controller buys:
/// a -30 % overlay on m6i makes a pod's node an m6i where list prices pick c6i; an overlay of
/// the same weight pricing the same offerings, earlier by name, is reported `Conflict` and
/// not applied (upstream applies the later name), as upstream marks conflicting overlays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_overlays_reprice_what_the_controller_buys_and_conflicts_are_reported() {
    let mut h = Harness::start_without_controller().await;
    create_karpenter_object(
        &h.client,
        "karpenter.sh",
        "NodePool",
        json!({"metadata": {"name": "priced"}, "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c6i", "m6i"]},
                {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["large", "xlarge"]}
            ]
        }}}}),
    )
    .await;
    let overlays: Api<DynamicObject> = Api::all_with(
        h.client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "karpenter.sh",
            "v1alpha1",
            "NodeOverlay",
        )),
    );
    for (name, change) in [
        ("m6i-discount", json!({"priceAdjustment": "-30%"})),
        ("a-m6i-flat", json!({"price": "5.0"})),
    ] {
        let mut spec = json!({"requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i"]}
        ]});
        spec.as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        overlays
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    h.run_with("kube-e2e-overlays", |o| o.settings.node_overlay = true);
    h.pending_pod(
        "priced-1",
        json!({}),
        json!({
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1500m"}}}],
            "nodeSelector": {"karpenter.sh/nodepool": "priced"}
        }),
    )
    .await;
    let instance_type = eventually("the NodeClaim's instance type", 30, || async {
        h.claims_of("priced").await.into_iter().find_map(|c| {
            c.metadata
                .labels?
                .get("node.kubernetes.io/instance-type")
                .cloned()
        })
    })
    .await;
    // c6i.large at list prices.
    assert!(instance_type.starts_with("m6i."), "{instance_type}");
    let status_of = |name: &'static str| {
        let overlays = overlays.clone();
        async move {
            let object = overlays.get(name).await.ok()?;
            let conditions = object.data["status"]["conditions"].as_array()?.clone();
            let find = |t: &str| {
                conditions.iter().find(|c| c["type"] == t).map(|c| {
                    (
                        c["status"].as_str().unwrap_or("").to_owned(),
                        c["reason"].as_str().unwrap_or("").to_owned(),
                    )
                })
            };
            Some((find("Ready")?, find("ValidationSucceeded")?))
        }
    };
    let applied = eventually("m6i-discount's status", 30, || status_of("m6i-discount")).await;
    assert_eq!(
        applied,
        (
            ("True".into(), "ValidationSucceeded".into()),
            ("True".into(), "ValidationSucceeded".into())
        )
    );
    // Its status is written before the first round (no conflict seen yet), then again.
    let left_out = eventually("a-m6i-flat's conflict", 30, || async {
        status_of("a-m6i-flat")
            .await
            .filter(|(ready, _)| ready.0 == "False")
    })
    .await;
    assert_eq!(
        left_out,
        (
            ("False".into(), "Conflict".into()),
            ("False".into(), "Conflict".into())
        )
    );
    h.stop().await;
}
