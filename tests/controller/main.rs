//! `controller` end to end against the in-memory API server, through a real `kube::Client`:
//! a pending pod gets a NodeClaim object, its simulated Node registers and is synced, the pod
//! can bind; deleting the NodeClaim drains the Node (respecting a PodDisruptionBudget) and
//! lets both objects go; a watch broken mid-stream does not duplicate NodeClaims. With EC2
//! (moto, started on 127.0.0.1): an instance launches, a new leader adopts it, an
//! interruption drains and terminates it, and a leaked instance is collected.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_actors::actor::Settings;
use karpenter_actors::actor::messages::GcSettings;
use karpenter_core::api::NodeClaim;
use karpenter_rs::kube::controller::{
    ControllerCloud, ControllerOptions, LeaderElection, Stopped, run,
};
use karpenter_rs::kube::leader::Timing;
use karpenter_test_apiserver::ApiServer;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn client(server: &ApiServer) -> Client {
    let mut config = Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// Installs karpenter-rs's CRDs, as `karpenter install` does; the server refuses custom
/// resources of kinds it has no CRD for, and admits the rest against their schemas.
async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_core::api::crds::all().unwrap() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
}

async fn create_karpenter_object(
    client: &Client,
    group: &str,
    kind: &str,
    value: serde_json::Value,
) {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let mut value = value;
    value["apiVersion"] = json!(format!("{group}/v1"));
    value["kind"] = json!(kind);
    let object: DynamicObject = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// A cluster with a NodePool and its EC2NodeClass, and the controller running against it.
struct Harness {
    server: ApiServer,
    client: Client,
    stop: Option<oneshot::Sender<()>>,
    controller: Option<JoinHandle<anyhow::Result<Stopped>>>,
    _journal: tempfile::TempDir,
    _kubelets: Kubelets,
}

/// What the kubelets of the nodes a test registers itself (not the controller's simulated
/// ones, whose kubelets it plays) do for pods being deleted: finish them once their grace
/// period ends, as the API server leaves a bound pod to its kubelet. Stopped when dropped.
struct Kubelets(JoinHandle<()>);

impl Kubelets {
    fn start(client: &Client) -> Kubelets {
        let pods: Api<Pod> = Api::all(client.clone());
        let nodes: Api<Node> = Api::all(client.clone());
        let client = client.clone();
        Kubelets(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (Ok(pods_now), Ok(nodes_now)) = (
                    pods.list(&Default::default()).await,
                    nodes.list(&Default::default()).await,
                ) else {
                    continue;
                };
                let ours: Vec<String> = nodes_now
                    .items
                    .iter()
                    .filter(|n| {
                        !n.metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.contains_key("karpenter-rs/simulated"))
                    })
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
                let now = jiff::Timestamp::now();
                for pod in pods_now.items {
                    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref());
                    let due = pod
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .is_some_and(|t| t.0 <= now);
                    if due && bound.is_some_and(|n| ours.contains(n)) {
                        let namespaced: Api<Pod> = Api::namespaced(
                            client.clone(),
                            pod.metadata.namespace.as_deref().unwrap_or("default"),
                        );
                        let _ = namespaced
                            .delete(
                                pod.metadata.name.as_deref().unwrap_or(""),
                                &kube::api::DeleteParams {
                                    grace_period_seconds: Some(0),
                                    ..Default::default()
                                },
                            )
                            .await;
                    }
                }
            }
        }))
    }
}

impl Drop for Kubelets {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Harness {
    async fn start(scope: &str) -> Harness {
        let mut h = Harness::start_without_controller().await;
        let journal = tempfile::tempdir().unwrap();
        let (stop, controller) = spawn_controller(&h.client, journal.path(), scope, "test", None);
        h.stop = Some(stop);
        h.controller = Some(controller);
        h._journal = journal;
        h
    }

    /// The cluster alone: a NodePool, its EC2NodeClass, no controller yet.
    async fn start_without_controller() -> Harness {
        Harness::start_with_class(json!({"metadata": {"name": "default"}, "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}]
        }}))
        .await
    }

    /// The cluster with `class` as the EC2NodeClass `default`, no controller yet.
    async fn start_with_class(class: serde_json::Value) -> Harness {
        // The controller's logs, shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("info,karpenter_rs=debug")
            .try_init();
        let server = ApiServer::start().await.unwrap();
        let client = client(&server);
        install_crds(&client).await;
        create_karpenter_object(&client, "karpenter.k8s.aws", "EC2NodeClass", class).await;
        create_karpenter_object(
            &client,
            "karpenter.sh",
            "NodePool",
            json!({"metadata": {"name": "general"}, "spec": {"template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
                }
            }}}),
        )
        .await;
        Harness {
            _kubelets: Kubelets::start(&client),
            server,
            client,
            stop: None,
            controller: None,
            _journal: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts the controller on the in-memory cloud with test timings, adjusted by `adjust`.
    fn run_with(&mut self, scope: &str, adjust: impl FnOnce(&mut ControllerOptions)) {
        let journal = tempfile::tempdir().unwrap();
        let cloud = ControllerCloud::Sim {
            region: "us-west-2".into(),
            boot_delay: Duration::from_millis(300),
        };
        let (stop, controller) = spawn_controller_with(
            &self.client,
            journal.path(),
            scope,
            "test",
            None,
            cloud,
            adjust,
        );
        self.stop = Some(stop);
        self.controller = Some(controller);
        self._journal = journal;
    }

    async fn stop(mut self) {
        if let (Some(stop), Some(controller)) = (self.stop.take(), self.controller.take()) {
            shut_down(stop, controller).await;
        }
        self.server.stop().await;
    }

    fn nodeclaims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Sets the NodePool's terminationGracePeriod.
    async fn grace_period(&self, period: &str) {
        let pools: Api<karpenter_core::api::NodePool> = Api::all(self.client.clone());
        let grace = json!({"spec": {"template": {"spec": {"terminationGracePeriod": period}}}});
        pools
            .patch("general", &PatchParams::default(), &Patch::Merge(&grace))
            .await
            .unwrap();
    }

    /// Annotates a pod `karpenter.sh/do-not-disrupt`.
    async fn do_not_disrupt(&self, pod: &str) {
        let protect = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
        self.pods()
            .patch(pod, &PatchParams::default(), &Patch::Merge(&protect))
            .await
            .unwrap();
    }

    /// Creates a pod kube-scheduler found no node for.
    async fn unschedulable_pod(&self, name: &str, labels: serde_json::Value) {
        self.pending_pod(
            name,
            labels,
            json!({
                "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
            }),
        )
        .await;
    }

    /// Creates a pod with `spec` that kube-scheduler marked Unschedulable.
    async fn pending_pod(&self, name: &str, labels: serde_json::Value, spec: serde_json::Value) {
        // A short grace period, so evicted pods are finished within a test's patience.
        let mut spec = spec;
        spec["terminationGracePeriodSeconds"] = json!(2);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": spec
        }))
        .unwrap();
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let status = json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available"
        }]}});
        self.pods()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

type Controller = (oneshot::Sender<()>, JoinHandle<anyhow::Result<Stopped>>);

/// Asks a controller to stop and checks that it does, cleanly, within 20 s.
async fn shut_down(stop: oneshot::Sender<()>, controller: JoinHandle<anyhow::Result<Stopped>>) {
    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(20), controller)
        .await
        .expect("the controller stops");
    assert_eq!(result.unwrap().unwrap(), Stopped::Shutdown);
}

/// Starts a controller with the in-memory cloud and test timings.
fn spawn_controller(
    client: &Client,
    dir: &std::path::Path,
    scope: &str,
    identity: &str,
    leader_election: Option<LeaderElection>,
) -> Controller {
    let cloud = ControllerCloud::Sim {
        region: "us-west-2".into(),
        boot_delay: Duration::from_millis(300),
    };
    spawn_controller_on(client, dir, scope, identity, leader_election, cloud)
}

/// Starts a controller on `cloud` with test timings.
fn spawn_controller_on(
    client: &Client,
    dir: &std::path::Path,
    scope: &str,
    identity: &str,
    leader_election: Option<LeaderElection>,
    cloud: ControllerCloud,
) -> Controller {
    spawn_controller_with(client, dir, scope, identity, leader_election, cloud, |_| {})
}

/// Starts a controller on `cloud` with test timings, adjusted by `adjust`.
fn spawn_controller_with(
    client: &Client,
    dir: &std::path::Path,
    scope: &str,
    identity: &str,
    leader_election: Option<LeaderElection>,
    cloud: ControllerCloud,
    adjust: impl FnOnce(&mut ControllerOptions),
) -> Controller {
    let mut options = ControllerOptions {
        journal_dir: dir.join(format!("journal-{identity}")),
        discard_damaged_journal: false,
        settings: Settings {
            batch_idle: Duration::from_millis(200),
            batch_max: Duration::from_secs(2),
            eviction_retry: Duration::from_millis(300),
            nodeclaim_name_seed: identity.bytes().map(u64::from).sum(),
            // Tests of other things keep their nodes; `disruption.rs` turns it on.
            disruption_enabled: false,
            ..Settings::default()
        },
        cloud,
        gc: GcSettings {
            interval: Duration::from_secs(2),
            // Short, so a leak is collected within seconds (two passes past the grace).
            grace: Duration::from_secs(3),
        },
        sync_timeout: Duration::from_secs(20),
        scope: scope.into(),
        identity: identity.into(),
        admin: None,
        probes: Vec::new(),
        leader_election,
    };
    adjust(&mut options);
    let (stop, stopped) = oneshot::channel::<()>();
    let controller = tokio::spawn(run(client.clone(), options, async {
        let _ = stopped.await;
    }));
    (stop, controller)
}

/// Polls `check` every 100 ms until it returns `Some`, for at most `seconds`.
async fn eventually<T, F, Fut>(what: &str, seconds: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(claim: &NodeClaim, type_: &str) -> Option<String> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

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

/// The Node of the only NodeClaim, once it is Ready, with the NodeClaim's name.
async fn ready_node(h: &Harness) -> (String, String) {
    eventually("a Ready NodeClaim with its Node", 30, || async {
        let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
        let claim = claims.into_iter().next()?;
        let node = claim.status.as_ref()?.node_name.clone()?;
        (condition(&claim, "Ready").as_deref() == Some("True"))
            .then(|| (claim.metadata.name.clone().unwrap(), node))
    })
    .await
}

async fn bind(h: &Harness, pod: &str, node: &str) {
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let _: serde_json::Value = h
        .pods()
        .create_subresource("binding", pod, &PostParams::default(), &binding)
        .await
        .unwrap();
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

/// What a kubelet does on start: registers `node` and reports it Ready with `capacity`
/// (its `capacity` and `allocatable`).
async fn node_reports_ready(h: &Harness, node: serde_json::Value, capacity: serde_json::Value) {
    let node: Node = serde_json::from_value(node).unwrap();
    let name = node.metadata.name.clone().unwrap();
    h.nodes()
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let mut status = capacity;
    status["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
    h.nodes()
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
}

/// Whether a pod counts toward a PodDisruptionBudget: Running, Ready and not being deleted.
fn healthy(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
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

async fn lease_holder(client: &Client) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-system");
    leases
        .get_opt("karpenter-leader-election")
        .await
        .ok()??
        .spec?
        .holder_identity
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

fn late_pool(labels: serde_json::Value) -> serde_json::Value {
    json!({"metadata": {"name": "late"}, "spec": {"template": {
        "metadata": {"labels": labels},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "taints": [{"key": "late", "value": "true", "effect": "NoSchedule"}]
        }
    }}})
}

impl Harness {
    /// A pending pod only the `late` NodePool can serve.
    async fn late_pod(&self, name: &str) {
        self.pending_pod(
            name,
            json!({}),
            json!({
                "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1500m"}}}],
                "nodeSelector": {"karpenter.sh/nodepool": "late"},
                "tolerations": [{"key": "late", "operator": "Exists", "effect": "NoSchedule"}]
            }),
        )
        .await;
    }

    async fn claims_of(&self, pool: &str) -> Vec<NodeClaim> {
        self.nodeclaims()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("karpenter.sh/nodepool"))
                    .is_some_and(|p| p == pool)
            })
            .collect()
    }
}

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

/// The Event of `reason` about `kind`/`name`, with its type and note.
async fn event_about(
    client: &Client,
    kind: &str,
    name: &str,
    reason: &str,
) -> Option<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    events
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find_map(|e| {
            let regarding = e.regarding.as_ref()?;
            (e.reason.as_deref() == Some(reason)
                && regarding.kind.as_deref() == Some(kind)
                && regarding.name.as_deref() == Some(name))
            .then(|| (e.type_.unwrap_or_default(), e.note.unwrap_or_default()))
        })
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_not_acted_on_are_reported_and_a_static_pool_provisions_nothing() {
    let h = Harness::start("kube-e2e-unsupported").await;
    // A static NodePool (upstream's `replicas`): admitted, as upstream's CRD admits it, and
    // reported on the pool; it launches nothing, not even for a pod only it could serve.
    let mut fixed = late_pool(json!({"team": "fixed"}));
    fixed["spec"]["replicas"] = json!(2);
    create_karpenter_object(&h.client, "karpenter.sh", "NodePool", fixed).await;
    h.late_pod("late-1").await;
    let (ready, reason, message) = eventually("the static pool reported not Ready", 30, || async {
        pool_condition(&h, "late", "Ready")
            .await
            .filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "UnsupportedField")
    );
    assert!(
        message.starts_with("spec.replicas: static NodePools are not supported yet"),
        "{message}"
    );
    let (status, _, _) = pool_condition(&h, "late", "UnsupportedFields")
        .await
        .unwrap();
    assert_eq!(status, "True");
    let (type_, note) = eventually("an Event naming the field", 30, || async {
        event_about(&h.client, "NodePool", "late", "UnsupportedField").await
    })
    .await;
    assert_eq!(type_, "Warning");
    assert!(note.contains("spec.replicas"), "{note}");
    assert!(
        h.claims_of("late").await.is_empty(),
        "a static pool launches nothing"
    );

    // A pool cannot become static: upstream's transition rule, enforced by the API server.
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let refused = pools
        .patch(
            "general",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("Cannot transition NodePool between static (replicas set) and dynamic"),
        "{refused}"
    );

    // Balanced consolidation: reported, and the pool still provisions.
    let balanced = json!({"spec": {"disruption": {"consolidationPolicy": "Balanced", "consolidateAfter": "30s"}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&balanced))
        .await
        .unwrap();
    let (_, _, message) = eventually("Balanced reported on the pool", 30, || async {
        pool_condition(&h, "general", "UnsupportedFields").await
    })
    .await;
    assert!(
        message.starts_with("spec.disruption.consolidationPolicy: Balanced"),
        "{message}"
    );
    assert_eq!(
        pool_condition(&h, "general", "Ready").await.unwrap().0,
        "True"
    );
    h.unschedulable_pod("web-1", json!({"app": "web"})).await;
    eventually("a NodeClaim of the Balanced pool", 30, || async {
        h.claims_of("general").await.into_iter().next()
    })
    .await;
    assert!(h.claims_of("late").await.is_empty());
    h.stop().await;
}

async fn events_with_reason(client: &Client, namespace: &str, reason: &str) -> usize {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    events
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .count()
        })
        .unwrap_or(0)
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

/// moto (this process's, held exclusively) reset, holding a VPC, subnets, a security group
/// and AMIs tagged for the cluster `test`, and its interruption queue.
async fn moto_for_test_cluster() -> (
    tokio::sync::MutexGuard<'static, ()>,
    karpenter_aws::config::Clients,
    karpenter_aws::emulator::Fixture,
) {
    use karpenter_aws::testing::{Fixture, Moto, ami_lookup, connection, create_queue};
    let lock = Moto::exclusive().await;
    let moto = Moto::shared();
    moto.reset();
    let clients = karpenter_aws::config::Clients::connect(&connection(&moto.endpoint())).await;
    let fixture = Fixture::create_with(&clients, "test", &ami_lookup())
        .await
        .unwrap();
    create_queue(&clients, "test-interruptions").await.unwrap();
    (lock, clients, fixture)
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
        interruption_queue: Some("test-interruptions".into()),
        prepare_emulator: false,
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
    );
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
async fn nodes_that_never_register_make_the_nodepool_unhealthy() {
    let h = Harness::start_without_controller().await;
    let dir = tempfile::tempdir().unwrap();
    // Instances whose Nodes would take an hour: every registration times out.
    let cloud = ControllerCloud::Sim {
        region: "us-west-2".into(),
        boot_delay: Duration::from_secs(3600),
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

mod disruption;
mod failover;
mod migrate_cas;
mod pending;
mod standins;
mod takeover;
mod watch_faults;
