//! `controller` end to end against the in-memory API server, through a real `kube::Client`,
//! on the in-memory cloud or on EC2 (moto, started on 127.0.0.1). This file is the harness
//! (the API server, the CRDs, controllers started and stopped, stand-in kubelets, polling)
//! and the helpers several themes share; each theme is a module of its own: a NodeClaim's
//! life ([`lifecycle`]), watches and leaders ([`leadership`]), NodePools ([`nodepools`]),
//! EC2 ([`ec2`]), Events ([`events`]), pending pods ([`pending`]), disruption ([`disruption`]), take-over and
//! migration ([`takeover`], [`migrate_cas`]) and the campaigns ([`failover`],
//! [`watch_faults`]), with the cluster's other controllers played by [`standins`].
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
        Harness::start_on(class, karpenter_test_apiserver::Options::default()).await
    }

    /// As [`Harness::start_with_class`], on a server started with `options`.
    async fn start_on(
        class: serde_json::Value,
        options: karpenter_test_apiserver::Options,
    ) -> Harness {
        // The controller's logs, shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("info,karpenter_rs=debug")
            .try_init();
        let server = ApiServer::start_with(options).await.unwrap();
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
            kubelets: Default::default(),
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

    /// Starts the controller as [`Harness::run_with`] does, on a client of its own built as
    /// `karpenter controller` builds it (throttled at upstream's defaults, retrying as
    /// client-go does), from a kubeconfig file.
    async fn run_on_own_client(&mut self, scope: &str) {
        let journal = tempfile::tempdir().unwrap();
        let kubeconfig = journal.path().join("kubeconfig");
        std::fs::write(&kubeconfig, self.server.kubeconfig()).unwrap();
        let client = karpenter_rs::kube::controller::connect(
            Some(&kubeconfig),
            None,
            karpenter_rs::kube::throttle::Limits::default(),
        )
        .await
        .expect("a client from the kubeconfig");
        let cloud = ControllerCloud::Sim {
            region: "us-west-2".into(),
            boot_delay: Duration::from_millis(300),
            kubelets: Default::default(),
        };
        let (stop, controller) =
            spawn_controller_with(&client, journal.path(), scope, "test", None, cloud, |_| {});
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
        kubelets: Default::default(),
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
        journal_bucket: None,
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

mod buffers;
mod disruption;
mod ec2;
mod events;
mod failover;
mod history;
mod history_faults;
mod leadership;
mod lifecycle;
mod migrate_cas;
mod nodepools;
mod pending;
mod repair;
mod standins;
mod takeover;
mod watch_faults;
