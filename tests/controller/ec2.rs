//! The controller on EC2 (moto, started on 127.0.0.1): an instance launches, a new leader
//! adopts it, an interruption drains and terminates it and a leaked instance is collected;
//! the grace period counts from the deletion across leaders; the NodeClaims of an invalid
//! NodePool are adopted, not terminated.

use super::*;

/// What a kubelet does when an EC2 instance boots: registers its Node (with the taint
/// Karpenter's NodeClaims ask for) and reports it Ready.
async fn kubelet_registers(h: &Harness, name: &str, provider_id: &str) {
    let node = json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large"
        }},
        "spec": {"providerID": provider_id, "taints": [
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
        ]}
    });
    let capacity = json!({
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}
    });
    node_reports_ready(h, node, capacity).await;
}

/// moto (this process's, held exclusively) reset and holding a VPC, subnets, a security
/// group and AMIs tagged for the cluster `test`, an interruption queue and a leaked
/// instance; the controller's EC2 cloud on it; a cluster whose EC2NodeClass selects them.
struct Ec2 {
    _moto: tokio::sync::MutexGuard<'static, ()>,
    clients: karpenter_aws::config::Clients,
    cloud: ControllerCloud,
    ghost: String,
    h: Harness,
}

async fn ec2() -> Ec2 {
    use karpenter_aws::testing::{Moto, connection, launch_unowned_instance, settings};
    let (lock, clients, fixture) = moto_for_test_cluster().await;
    let moto = Moto::shared();
    let ghost = launch_unowned_instance(&clients, &fixture, "ghost-nodeclaim")
        .await
        .unwrap();
    let cloud = ControllerCloud::Aws(Box::new(karpenter_rs::system::aws::AwsSetup {
        connection: connection(&moto.endpoint()),
        settings: settings("test"),
        // Only the name: the rest is discovered (the API server's /version, then
        // DescribeCluster of the cluster the fixture created).
        cluster: karpenter_aws::cluster::KnownCluster {
            name: "test".into(),
            ..Default::default()
        },
        interruption_queue: Some("test-interruptions".into()),
        prepare_emulator: false,
        isolated_vpc: false,
    }));
    let class = serde_json::to_value(fixture.node_class("default")).unwrap();
    let h = Harness::start_with_class(class).await;
    Ec2 {
        _moto: lock,
        clients,
        cloud,
        ghost,
        h,
    }
}

/// Waits for the first NodeClaim to launch; returns its name, provider id and instance id.
async fn launched(h: &Harness) -> (String, String, String) {
    let (name, provider_id) = eventually("a launched NodeClaim", 60, || async {
        let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
        let claim = claims.into_iter().next()?;
        let provider_id = claim.status.as_ref()?.provider_id.clone()?;
        (condition(&claim, "Launched").as_deref() == Some("True"))
            .then(|| (claim.metadata.name.clone().unwrap(), provider_id))
    })
    .await;
    let instance_id = provider_id.rsplit('/').next().unwrap().to_owned();
    (name, provider_id, instance_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ec2_a_new_leader_adopts_the_instance_and_an_interruption_ends_it() {
    use karpenter_aws::testing::instance_states;
    let Ec2 {
        _moto,
        clients,
        cloud,
        ghost,
        h,
    } = ec2().await;
    let dir = tempfile::tempdir().unwrap();
    let (stop_a, a) = spawn_controller_on(
        &h.client,
        dir.path(),
        "kube-ec2-a",
        "a",
        None,
        cloud.clone(),
    );

    // A pending pod: a NodeClaim, an EC2 instance tagged with it, its provider id recorded.
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let (name, provider_id, instance_id) = launched(&h).await;
    let states = instance_states(&clients, "test").await.unwrap();
    assert_eq!(
        states.get(&instance_id).map(String::as_str),
        Some("running"),
        "{states:?}"
    );

    // a stops before the instance's kubelet registers; b starts with a journal of its own and
    // adopts the NodeClaim: no new NodeClaim, no new instance.
    shut_down(stop_a, a).await;
    let (stop_b, b) = spawn_controller_on(&h.client, dir.path(), "kube-ec2-b", "b", None, cloud);

    // The kubelet registers the Node; b's adopted actor syncs it, the NodeClaim initializes
    // and the pod binds.
    kubelet_registers(&h, "ip-10-0-1-1.us-west-2.compute.internal", &provider_id).await;
    let (adopted, node) = ready_node(&h).await;
    assert_eq!(adopted, name, "adopted, not replaced");
    bind(&h, "web-1", &node).await;
    let claims = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1);
    let node_object = h.nodes().get(&node).await.unwrap();
    let taints = node_object.spec.unwrap().taints.unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/unregistered"),
        "{taints:?}"
    );

    // The EC2NodeClass status shows what it resolved to.
    eventually("the EC2NodeClass status", 30, || async {
        let classes: Api<karpenter_core::api::EC2NodeClass> = Api::all(h.client.clone());
        let status = classes.get("default").await.ok()?.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.subnets.len() == 2 && !status.amis.is_empty()).then_some(())
    })
    .await;

    // The leaked instance (tagged for a NodeClaim that does not exist) is collected, and it
    // is the only other instance ever launched.
    eventually("the leaked instance terminated", 30, || async {
        let states = instance_states(&clients, "test").await.ok()?;
        matches!(
            states.get(&ghost).map(String::as_str),
            Some("terminated" | "shutting-down")
        )
        .then_some(())
    })
    .await;
    let states = instance_states(&clients, "test").await.unwrap();
    let ids: Vec<&String> = states.keys().collect();
    assert_eq!(ids.len(), 2, "{states:?}");
    assert_eq!(states[&instance_id], "running");

    // A scheduled-maintenance notice for the instance: b (which only knows the NodeClaim by
    // adoption) drains the pod, terminates the instance and lets the objects go.
    let queue = karpenter_aws::sqs::SqsQueue::connect(
        clients.sqs.clone(),
        "test-interruptions",
        karpenter_aws::sqs::Polling::default(),
    )
    .await
    .unwrap();
    let body = karpenter_aws::messages::event_body(
        karpenter_core::ports::InterruptionKind::ScheduledChange,
        &instance_id,
        "us-west-2",
        "2026-11-22T00:00:00Z",
    )
    .unwrap();
    queue.send(&body).await.unwrap();
    eventually(
        "the interrupted NodeClaim, Node and pod gone, the instance terminated",
        60,
        || async {
            let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
            let nodes = h.nodes().list(&Default::default()).await.ok()?.items;
            let pods = h.pods().list(&Default::default()).await.ok()?.items;
            let states = instance_states(&clients, "test").await.ok()?;
            let terminated = matches!(
                states.get(&instance_id).map(String::as_str),
                Some("terminated" | "shutting-down")
            );
            (claims.is_empty() && nodes.is_empty() && pods.is_empty() && terminated).then_some(())
        },
    )
    .await;
    assert!(
        events_with_reason(&h.client, "default", "Evicted").await >= 1,
        "the pod was evicted, not just deleted"
    );
    shut_down(stop_b, b).await;
    h.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ec2_the_grace_period_counts_from_the_deletion_across_leaders() {
    use karpenter_aws::testing::instance_states;
    let Ec2 {
        _moto,
        clients,
        cloud,
        h,
        ..
    } = ec2().await;
    h.grace_period("6s").await;
    let dir = tempfile::tempdir().unwrap();
    let (stop_a, a) = spawn_controller_on(
        &h.client,
        dir.path(),
        "kube-ec2-grace-a",
        "a",
        None,
        cloud.clone(),
    );
    h.unschedulable_pod("batch-1", json!({"app": "batch"}))
        .await;
    let (name, provider_id, instance_id) = launched(&h).await;
    kubelet_registers(&h, "ip-10-0-1-2.us-west-2.compute.internal", &provider_id).await;
    let (_, node) = ready_node(&h).await;
    bind(&h, "batch-1", &node).await;
    h.do_not_disrupt("batch-1").await;

    // Deleted while no replica leads; the grace period passes meanwhile.
    shut_down(stop_a, a).await;
    h.nodeclaims()
        .delete(&name, &Default::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        h.nodeclaims().get_opt(&name).await.unwrap().is_some(),
        "the finalizer holds it"
    );

    // b adopts the NodeClaim being deleted: its grace period is already over, so the
    // do-not-disrupt pod does not hold the drain for another six seconds. Timed from b's
    // first act on it (the Node cordoned), not from b's start, which loads the catalog.
    let (stop_b, b) =
        spawn_controller_on(&h.client, dir.path(), "kube-ec2-grace-b", "b", None, cloud);
    let claim_gone = || async {
        let gone = h.nodeclaims().get_opt(&name).await.ok()?.is_none();
        let states = instance_states(&clients, "test").await.ok()?;
        let terminated = matches!(
            states.get(&instance_id).map(String::as_str),
            Some("terminated" | "shutting-down")
        );
        (gone && terminated).then_some(())
    };
    eventually("b to start draining", 60, || async {
        let cordoned = h
            .nodes()
            .get_opt(&node)
            .await
            .ok()?
            .is_none_or(|n| n.spec.and_then(|s| s.unschedulable) == Some(true));
        cordoned.then_some(())
    })
    .await;
    let started = tokio::time::Instant::now();
    eventually(
        "the NodeClaim finalized, its instance terminated",
        30,
        claim_gone,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "counted from the deletion, not from b's drain: {:?}",
        started.elapsed()
    );
    assert!(events_with_reason(&h.client, "default", "TerminationGracePeriodExpiring").await > 0);
    shut_down(stop_b, b).await;
    h.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ec2_nodeclaims_of_an_invalid_nodepool_are_adopted_not_terminated() {
    use karpenter_aws::testing::instance_states;
    let Ec2 {
        _moto,
        clients,
        cloud,
        h,
        ..
    } = ec2().await;
    let dir = tempfile::tempdir().unwrap();
    let (stop_a, a) = spawn_controller_on(
        &h.client,
        dir.path(),
        "kube-ec2-invalid-a",
        "a",
        None,
        cloud.clone(),
    );
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    let (name, provider_id, instance_id) = launched(&h).await;
    kubelet_registers(&h, "ip-10-0-1-3.us-west-2.compute.internal", &provider_id).await;
    ready_node(&h).await;
    shut_down(stop_a, a).await;

    // While no replica leads, the NodePool becomes invalid (a taint given twice).
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    // The API server admits it (taints are an atomic list), the controller's runtime
    // validation does not (each key and effect may appear once), as upstream's.
    let invalid = json!({"spec": {"template": {"spec": {"taints": [
        {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
    ]}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&invalid))
        .await
        .unwrap();

    // b adopts the NodeClaim under the invalid pool instead of terminating its instance.
    let (stop_b, b) = spawn_controller_on(
        &h.client,
        dir.path(),
        "kube-ec2-invalid-b",
        "b",
        None,
        cloud,
    );
    eventually("the adopted NodeClaim marked Drifted", 30, || async {
        let claim = h.nodeclaims().get(&name).await.ok()?;
        (condition(&claim, "Drifted").as_deref() == Some("True")).then_some(())
    })
    .await;
    let states = instance_states(&clients, "test").await.unwrap();
    assert_eq!(states[&instance_id], "running", "{states:?}");
    assert!(events_with_reason(&h.client, "default", "InvalidNodePool").await > 0);

    // Its actor runs it: deleting it drains and terminates as usual.
    h.nodeclaims()
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually(
        "the NodeClaim gone, its instance terminated",
        30,
        || async {
            let gone = h.nodeclaims().get_opt(&name).await.ok()?.is_none();
            let states = instance_states(&clients, "test").await.ok()?;
            let terminated = matches!(
                states.get(&instance_id).map(String::as_str),
                Some("terminated" | "shutting-down")
            );
            (gone && terminated).then_some(())
        },
    )
    .await;
    shut_down(stop_b, b).await;
    h.server.stop().await;
}
