//! Taking over a cluster upstream Karpenter ran: its NodeClaims, Nodes and instances, as
//! upstream v1 writes them, are adopted in place; the switch of controllers drifts nothing
//! (upstream's hashes are re-stamped with the templates as they are), later template changes
//! do, and pending pods are served.

use super::*;

/// A NodeClaim as upstream v1 writes it, with its status, for an instance launched for it.
fn upstream_nodeclaim(name: &str, pool_uid: &str) -> serde_json::Value {
    json!({
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": "general",
                "team": "web",
                "karpenter.k8s.aws/ec2nodeclass": "default",
                "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.large",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "karpenter.k8s.aws/instance-category": "m",
                "karpenter.k8s.aws/instance-family": "m5",
                "karpenter.k8s.aws/instance-generation": "5",
                "karpenter.k8s.aws/instance-size": "large",
                "karpenter.k8s.aws/instance-cpu": "2",
                "karpenter.k8s.aws/instance-memory": "8192"
            },
            "annotations": {
                "karpenter.sh/nodepool-hash": "6821555240594823858",
                "karpenter.sh/nodepool-hash-version": "v3",
                "karpenter.k8s.aws/ec2nodeclass-hash": "15535182697325354914",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6",
                "karpenter.k8s.aws/tagged": "true"
            },
            "finalizers": ["karpenter.sh/termination"],
            "ownerReferences": [{
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "general",
                "uid": pool_uid, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["general"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
            ],
            "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi", "pods": "1"}},
            "expireAfter": "720h"
        }
    })
}

/// The status upstream writes once its node initialized.
fn upstream_status(provider_id: &str, node: &str) -> serde_json::Value {
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
               "lastTransitionTime": "2026-11-20T10:00:00Z"})
    };
    json!({"status": {
        "providerID": provider_id,
        "nodeName": node,
        "imageID": "ami-0123456789abcdef0",
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        "conditions": [
            condition("Launched"), condition("Registered"),
            condition("Initialized"), condition("Ready")
        ]
    }})
}

fn annotation(claim: &NodeClaim, key: &str) -> Option<String> {
    claim.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_upstream_karpenter_ran_is_taken_over_without_replacing_a_node() {
    use karpenter_aws::testing::{
        Moto, connection, instance_states, launch_tagged_instance, settings,
    };
    let (_moto, clients, fixture) = moto_for_test_cluster().await;
    let class = serde_json::to_value(fixture.node_class("default")).unwrap();
    let h = Harness::start_with_class(class).await;
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let pool_uid = pools.get("general").await.unwrap().metadata.uid.unwrap();

    // What upstream left: two instances tagged as it tags them, their NodeClaims and Nodes.
    let mut taken_over = Vec::new();
    for (i, name) in ["general-7lp2x", "general-q9k4d"].into_iter().enumerate() {
        let tags = [
            ("karpenter.sh/nodepool", "general"),
            ("karpenter.sh/nodeclaim", name),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("kubernetes.io/cluster/test", "owned"),
            ("eks:eks-cluster-name", "test"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (instance_id, zone) = launch_tagged_instance(&clients, &fixture, &tags)
            .await
            .unwrap();
        let provider_id = format!("aws:///{zone}/{instance_id}");
        let node = format!("ip-10-0-2-{i}.us-west-2.compute.internal");
        create_karpenter_object(
            &h.client,
            "karpenter.sh",
            "NodeClaim",
            upstream_nodeclaim(name, &pool_uid),
        )
        .await;
        h.nodeclaims()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&upstream_status(&provider_id, &node)),
            )
            .await
            .unwrap();
        let node_object = json!({
            "metadata": {"name": node, "labels": {
                "kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large",
                "karpenter.sh/nodepool": "general", "karpenter.sh/capacity-type": "on-demand",
                "team": "web",
                "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true",
                "topology.kubernetes.io/zone": zone
            }, "finalizers": ["karpenter.sh/termination"]},
            "spec": {"providerID": provider_id, "taints": [
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"}
            ]}
        });
        let capacity = json!({
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}
        });
        node_reports_ready(&h, node_object, capacity).await;
        taken_over.push((name.to_owned(), instance_id));
    }

    // The dry run says what will happen, and changes nothing.
    let plan = karpenter_rs::kube::migrate::plan_from_karpenter(&h.client)
        .await
        .unwrap();
    let report = plan.render();
    for line in [
        "NodePool/general: used as it is",
        "EC2NodeClass/default: used as it is",
        "NodeClaims: 2 (2 adopted in place, 0 deleted; no node is replaced by the switch)",
        "general-7lp2x (general, Initialized): adopted with aws:///",
        "NodePool hash v3, EC2NodeClass hash v6 re-stamped",
        "Pending pods: 0",
    ] {
        assert!(report.contains(line), "missing {line:?} in\n{report}");
    }

    // karpenter-rs starts with a journal of its own.
    let dir = tempfile::tempdir().unwrap();
    let cloud = ControllerCloud::Aws(Box::new(karpenter_rs::system::aws::AwsSetup {
        connection: connection(&Moto::shared().endpoint()),
        settings: settings("test"),
        cluster: karpenter_aws::testing::known_cluster("test"),
        interruption_queue: Some("test-interruptions".into()),
        prepare_emulator: false,
        isolated_vpc: false,
    }));
    let (stop, controller) =
        spawn_controller_on(&h.client, dir.path(), "kube-takeover", "rs", None, cloud);

    // Each NodeClaim is adopted in place: stamped with the pool's template as it is now, not
    // drifted, its instance running.
    for (name, _) in &taken_over {
        eventually("the NodePool hash re-stamped", 30, || async {
            let claim = h.nodeclaims().get(name).await.ok()?;
            (annotation(&claim, "karpenter.sh/nodepool-hash-version").as_deref()
                == Some(karpenter_core::api::nodeclaim::NODEPOOL_HASH_VERSION))
            .then_some(())
        })
        .await;
    }
    // Several garbage-collection passes (every 2 s here) and drift checks later, nothing
    // was replaced, terminated or marked drifted.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let claims = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let names: Vec<String> = claims
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, ["general-7lp2x", "general-q9k4d"]);
    for claim in &claims {
        assert_eq!(condition(claim, "Drifted"), None, "{claim:?}");
        assert_eq!(condition(claim, "Initialized").as_deref(), Some("True"));
    }
    let states = instance_states(&clients, "test").await.unwrap();
    for (_, instance_id) in &taken_over {
        assert_eq!(states[instance_id], "running", "{states:?}");
    }

    // Pending pods are served: one too big for the taken-over nodes gets a node of its own.
    h.pending_pod(
        "big-1",
        json!({"app": "big"}),
        json!({
            "containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": "3", "memory": "4Gi"}}}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
        }),
    )
    .await;
    eventually(
        "a third NodeClaim launched for the pending pod",
        60,
        || async {
            let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
            let launched = claims
                .iter()
                .filter(|c| condition(c, "Launched").as_deref() == Some("True"))
                .count();
            (claims.len() == 3 && launched == 3).then_some(())
        },
    )
    .await;

    // A later template change drifts the taken-over NodeClaims, as it would our own.
    let labelled = json!({"spec": {"template": {"metadata": {"labels": {"team": "api"}}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&labelled))
        .await
        .unwrap();
    for (name, _) in &taken_over {
        eventually(
            "the taken-over NodeClaim drifted by the change",
            30,
            || async {
                let claim = h.nodeclaims().get(name).await.ok()?;
                (condition(&claim, "Drifted").as_deref() == Some("True")).then_some(claim)
            },
        )
        .await;
    }
    let claim = h.nodeclaims().get(&taken_over[0].0).await.unwrap();
    assert_eq!(
        annotation(&claim, "karpenter.k8s.aws/ec2nodeclass-hash-version").as_deref(),
        Some(karpenter_core::api::ec2nodeclass::EC2NODECLASS_HASH_VERSION),
        "the node class hash is ours too once the class is known"
    );
    let states = instance_states(&clients, "test").await.unwrap();
    for (_, instance_id) in &taken_over {
        assert_eq!(states[instance_id], "running", "{states:?}");
    }
    shut_down(stop, controller).await;
    h.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_cloud_refuses_a_cluster_with_ec2_nodes() {
    let mut h = Harness::start_without_controller().await;
    // A Node a real kubelet on EC2 registered (upstream's, or a managed node group's).
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "ip-10-0-12-7.us-west-2.compute.internal"},
        "spec": {"providerID": "aws:///us-west-2a/i-0a1b2c3d4e5f67890"}
    }))
    .unwrap();
    h.nodes()
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    h.run_with("test", |_| {});
    let controller = h.controller.take().unwrap();
    let result = tokio::time::timeout(Duration::from_secs(20), controller)
        .await
        .expect("the controller stops by itself")
        .unwrap();
    let error = format!("{:#}", result.expect_err("--cloud sim refused"));
    for part in [
        "--cloud sim",
        "ip-10-0-12-7.us-west-2.compute.internal",
        "aws:///us-west-2a/i-0a1b2c3d4e5f67890",
        "--cloud aws",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }
    // It created nothing.
    let nodes = h.nodes().list(&Default::default()).await.unwrap();
    assert_eq!(nodes.items.len(), 1);
    assert!(
        h.nodeclaims()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    h.stop.take();
    h.stop().await;
}
