//! Nodes for the in-memory cloud in a real cluster (`controller --cloud sim`), with what their
//! kubelets would do, as kwok's nodes do it:
//!
//! - each instance that boots registers a Node object (provider id, the
//!   `karpenter.sh/unregistered` taint, capacity, allocatable and labels from the catalog, an
//!   internal IP), and is kept alive: its Lease in `kube-node-lease` renewed, its `Ready`
//!   condition refreshed, so a real control plane's node lifecycle controller never marks it
//!   NotReady — unless it is told its kubelet stopped ([`KUBELET_ANNOTATION`]);
//! - pods bound to the Node start: `Running`, `Ready`, container statuses, a pod IP, so
//!   PodDisruptionBudgets count them healthy and rollouts progress;
//! - pods being deleted are finished when their grace period ends (deleted with none left),
//!   so drains complete;
//! - when the instance goes, the Node goes, and its pods with it (as the pod garbage collector
//!   removes pods of a deleted Node).
//!
//! The instances are the in-memory cloud's in the controller's own process
//! ([`Instances::Cloud`]), or, in `karpenter sim-nodes`, those the controller's NodeClaims
//! stand for ([`Instances::NodeClaims`], from [`super::claimwatch`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use karpenter_core::model::InstanceType;
use karpenter_core::ports::{CloudProvider, Instance, InstanceState};
use karpenter_core::vocab::labels;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::simcloud::InstanceBooted;

/// How often a node's Lease is renewed (a kubelet's default).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How long a node Lease is valid (a kubelet's default).
const LEASE_SECONDS: i32 = 40;
/// How often the `Ready` condition's heartbeat is refreshed.
const STATUS_EVERY: Duration = Duration::from_secs(60);
/// How often pods whose grace period ended are finished.
const FINISH_EVERY: Duration = Duration::from_secs(1);

/// A Node annotated `karpenter-rs/kubelet: stopped` has a kubelet that stopped
/// heartbeating: its Lease is no longer renewed nor its `Ready` refreshed, so a control
/// plane's node lifecycle controller marks it `Unknown` (`kubectl annotate node <name>
/// karpenter-rs/kubelet=stopped`; removing it starts the heartbeat again).
pub const KUBELET_ANNOTATION: &str = "karpenter-rs/kubelet";

/// The Node name an instance registers as.
pub fn node_name(instance: &Instance) -> String {
    format!("ip-{}.sim.internal", instance.id.trim_start_matches("i-"))
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// An IPv4 address counted from `base` (`10.0.0.0` for nodes, `100.64.0.0` for pods).
fn address(base: u32, n: u32) -> String {
    std::net::Ipv4Addr::from(base.wrapping_add(n)).to_string()
}

/// The annotation every simulated Node carries.
pub const SIMULATED_ANNOTATION: &str = "karpenter-rs/simulated";

/// The Nodes (`name (providerID)`) that are EC2 instances and not simulated ones.
pub fn real_ec2_nodes(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|node| {
            let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
            let simulated = node
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.get(SIMULATED_ANNOTATION).is_some_and(|v| v == "true"));
            (provider_id.starts_with("aws://") && !simulated).then(|| {
                format!(
                    "{} ({provider_id})",
                    node.metadata.name.as_deref().unwrap_or_default()
                )
            })
        })
        .collect()
}

/// The Node object a kubelet on `instance` would register, with internal IP `ip`.
pub fn node_object(instance: &Instance, instance_type: &InstanceType, ip: &str) -> Node {
    let name = node_name(instance);
    let mut node_labels = instance.node_labels(Some(instance_type));
    node_labels.insert(labels::HOSTNAME.into(), name.clone());
    let quantities = |r: karpenter_core::model::Resources| r.to_quantity_map();
    let value = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {SIMULATED_ANNOTATION: "true"},
        },
        "spec": {
            "providerID": instance.provider_id,
            "taints": [{"key": labels::UNREGISTERED_TAINT, "effect": "NoExecute"}],
        },
        "status": {
            "capacity": quantities(instance_type.capacity),
            "allocatable": quantities(instance_type.allocatable()),
            "conditions": [ready_condition()],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": instance_type.labels.get(labels::ARCH).cloned().unwrap_or_else(|| "amd64".into()),
                "operatingSystem": "linux",
                "kubeletVersion": "v1.33.0-sim",
                "machineID": instance.id, "systemUUID": instance.id, "bootID": instance.id,
                "kernelVersion": "", "osImage": "simulated", "containerRuntimeVersion": "sim://1",
                "kubeProxyVersion": "",
            },
        },
    });
    serde_json::from_value(value).unwrap_or_default()
}

fn ready_condition() -> serde_json::Value {
    let now = now();
    json!({
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "simulated kubelet is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    })
}

/// A pod's status once its containers run, as a kubelet reports it.
pub fn running_status(pod: &Pod, host_ip: &str, pod_ip: &str, now: &str) -> serde_json::Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let container = |name: &str, image: &Option<String>| {
        let image = image.clone().unwrap_or_default();
        json!({
            "name": name, "image": image, "imageID": format!("sim://{image}"),
            "containerID": format!("sim://{uid}/{name}"), "restartCount": 0,
        })
    };
    let containers: Vec<serde_json::Value> = spec
        .containers
        .iter()
        .map(|c| {
            let mut status = container(&c.name, &c.image);
            status["ready"] = json!(true);
            status["started"] = json!(true);
            status["state"] = json!({"running": {"startedAt": now}});
            status
        })
        .collect();
    let init: Vec<serde_json::Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let mut status = container(&c.name, &c.image);
            status["ready"] = json!(true);
            status["state"] = json!({"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
            }});
            status
        })
        .collect();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers"),
            condition("Initialized"),
            condition("Ready"),
            condition("ContainersReady"),
            condition("PodScheduled"),
        ],
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "containerStatuses": containers,
        "initContainerStatuses": init,
    }})
}

/// Whether a pod already reports running and ready.
fn reports_ready(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// A pod by namespace, name and uid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PodRef {
    namespace: String,
    name: String,
    uid: String,
}

impl PodRef {
    fn of(pod: &Pod) -> PodRef {
        PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// Where the running instances are read.
#[derive(Clone)]
pub enum Instances {
    /// The in-memory cloud itself.
    Cloud(Arc<dyn CloudProvider>),
    /// The instance ids whose NodeClaims exist.
    NodeClaims(super::claimwatch::Alive),
}

impl Instances {
    async fn states(&self) -> Result<BTreeMap<String, InstanceState>, String> {
        match self {
            Instances::Cloud(cloud) => Ok(cloud
                .list()
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|i| (i.id, i.state))
                .collect()),
            Instances::NodeClaims(alive) => Ok(alive
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .map(|id| (id.clone(), InstanceState::Running))
                .collect()),
        }
    }
}

/// Registers booted instances as Nodes, plays their kubelets, and removes them (with their
/// pods) when their instance is gone.
pub struct SimNodes {
    client: Client,
    instances: Instances,
    /// The NodeOverlays in force: a node advertises the extended resources they add to its
    /// type, as the device plugin they stand for would.
    overlays: Option<Arc<karpenter_actors::overlays::OverlayStore>>,
    /// Nodes registered, by instance id.
    nodes: BTreeMap<String, String>,
    /// Each node's internal IP, by node name.
    node_ips: BTreeMap<String, String>,
    /// Addresses handed out so far (nodes, pods).
    addresses: (u32, u32),
    /// Pods being deleted, by when their grace period ends (Unix milliseconds).
    terminating: std::collections::BTreeSet<(i64, PodRef)>,
    /// Pods whose start was reported.
    started: std::collections::BTreeSet<PodRef>,
    /// Nodes deleted whose pods could not be listed yet (retried with the finishing).
    gone: std::collections::BTreeSet<String>,
}

impl SimNodes {
    /// Nodes for the `instances`, written through `client`.
    pub fn new(client: Client, instances: Instances) -> Self {
        SimNodes {
            client,
            instances,
            overlays: None,
            nodes: BTreeMap::new(),
            node_ips: BTreeMap::new(),
            addresses: (0, 0),
            terminating: std::collections::BTreeSet::new(),
            started: std::collections::BTreeSet::new(),
            gone: std::collections::BTreeSet::new(),
        }
    }

    /// Nodes advertise the extended resources `overlays` add to their types.
    pub fn with_overlays(
        mut self,
        overlays: Arc<karpenter_actors::overlays::OverlayStore>,
    ) -> Self {
        self.overlays = Some(overlays);
        self
    }

    /// Runs until `booted` closes: registers each booted instance's Node, starts and finishes
    /// the pods bound to it, renews Leases, refreshes Ready, and deletes the Nodes (and pods)
    /// of instances that are gone.
    pub async fn run(mut self, mut booted: mpsc::UnboundedReceiver<InstanceBooted>) {
        let mut renew = tokio::time::interval(LEASE_RENEW);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut finish = tokio::time::interval(FINISH_EVERY);
        finish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_status = tokio::time::Instant::now();
        let pods: Api<Pod> = Api::all(self.client.clone());
        let mut pod_events = watcher::watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        loop {
            tokio::select! {
                next = booted.recv() => match next {
                    Some(b) => self.register(&b.instance, &b.instance_type).await,
                    None => return,
                },
                event = pod_events.next() => match event {
                    Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => self.pod_changed(&pod).await,
                    Some(Ok(Event::Delete(pod))) => self.pod_gone(&pod),
                    Some(Ok(Event::Init | Event::InitDone)) => {}
                    Some(Err(error)) => debug!(%error, "Watching pods for the simulated kubelets failed; retrying."),
                    None => return,
                },
                _ = finish.tick() => self.finish_terminated().await,
                _ = renew.tick() => {
                    let refresh = last_status.elapsed() >= STATUS_EVERY;
                    if refresh {
                        last_status = tokio::time::Instant::now();
                    }
                    self.heartbeat(refresh).await;
                }
            }
        }
    }

    /// A pod bound to one of our nodes starts, or, when being deleted, waits to be finished.
    async fn pod_changed(&mut self, pod: &Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let Some(host_ip) = self.node_ips.get(&node).cloned() else {
            return;
        };
        let reference = PodRef::of(pod);
        if let Some(deletion) = &pod.metadata.deletion_timestamp {
            let due = deletion.0.as_millisecond();
            self.terminating.retain(|(_, p)| *p != reference);
            self.terminating.insert((due, reference));
            return;
        }
        if reports_ready(pod) || self.started.contains(&reference) {
            return;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return;
        }
        self.addresses.1 += 1;
        let pod_ip = address(0x6440_0000, self.addresses.1);
        let status = running_status(pod, &host_ip, &pod_ip, &now());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &reference.namespace);
        match pods
            .patch_status(
                &reference.name,
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
        {
            Ok(_) => {
                debug!(pod = %reference.name, node, "Simulated pod started.");
                self.started.insert(reference);
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(error) => {
                warn!(pod = %reference.name, %error, "Starting the simulated pod failed.")
            }
        }
    }

    fn pod_gone(&mut self, pod: &Pod) {
        let reference = PodRef::of(pod);
        self.started.remove(&reference);
        self.terminating.retain(|(_, p)| *p != reference);
    }

    /// Deletes, with no grace left, the pods whose grace period ended, and the pods of
    /// deleted Nodes not yet listed.
    async fn finish_terminated(&mut self) {
        for node in std::mem::take(&mut self.gone) {
            self.delete_pods_of(&node).await;
        }
        let now = jiff::Timestamp::now().as_millisecond();
        let due: Vec<(i64, PodRef)> = self
            .terminating
            .iter()
            .take_while(|(at, _)| *at <= now)
            .cloned()
            .collect();
        for entry in due {
            self.terminating.remove(&entry);
            self.delete_pod(&entry.1).await;
        }
    }

    /// Deletes a pod at once (the uid guards against a new pod of the same name); one that
    /// could not be deleted is tried again with the next finishing.
    async fn delete_pod(&mut self, pod: &PodRef) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&pod.name, &params).await {
            Ok(_) => debug!(pod = %pod.name, "Simulated pod finished."),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => {}
            Err(error) => {
                warn!(pod = %pod.name, %error, "Finishing the simulated pod failed; retrying.");
                let retry = jiff::Timestamp::now().as_millisecond() + 1_000;
                self.terminating.insert((retry, pod.clone()));
                return;
            }
        }
        self.started.remove(pod);
    }

    /// The pods bound to a Node that went: deleted, as the pod garbage collector does.
    async fn delete_pods_of(&mut self, node: &str) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let bound = ListParams::default().fields(&format!("spec.nodeName={node}"));
        match pods.list(&bound).await {
            Ok(list) => {
                for pod in &list.items {
                    self.delete_pod(&PodRef::of(pod)).await;
                }
            }
            Err(error) => {
                warn!(node, %error, "Listing the pods of a deleted simulated Node failed; retrying.");
                self.gone.insert(node.to_owned());
            }
        }
    }

    async fn register(&mut self, instance: &Instance, instance_type: &InstanceType) {
        if instance.state != InstanceState::Running {
            return;
        }
        let name = node_name(instance);
        let ip = match self.node_ips.get(&name) {
            Some(ip) => ip.clone(),
            None => {
                self.addresses.0 += 1;
                address(0x0a00_0000, self.addresses.0)
            }
        };
        let node = match &self.overlays {
            Some(overlays) => {
                let it = overlays.as_applied(&instance.nodepool, &Arc::new(instance_type.clone()));
                node_object(instance, &it, &ip)
            }
            None => node_object(instance, instance_type, &ip),
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
        let status = node.status.clone();
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(error) => {
                warn!(node = %name, %error, "Registering the simulated Node failed.");
                return;
            }
        }
        // Status is a subresource: a create leaves it to the kubelet, which is us.
        let patch = json!({"status": status});
        if let Err(error) = nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            warn!(node = %name, %error, "Reporting the simulated Node's status failed.");
        }
        info!(node = %name, instance.id = %instance.id, "Simulated Node registered.");
        self.node_ips.insert(name.clone(), ip);
        self.nodes.insert(instance.id.clone(), name);
        self.renew_lease(&self.nodes[&instance.id].clone()).await;
    }

    async fn renew_lease(&self, node: &str) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let lease = Lease {
            metadata: kube::core::ObjectMeta {
                name: Some(node.to_owned()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(node.to_owned()),
                lease_duration_seconds: Some(LEASE_SECONDS),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..Default::default()
            }),
        };
        let mut lease = serde_json::to_value(&lease).unwrap_or_default();
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        let params = PatchParams::apply("karpenter-rs-simulated-kubelet").force();
        if let Err(error) = leases.patch(node, &params, &Patch::Apply(&lease)).await {
            debug!(node, %error, "Renewing the simulated node's Lease failed.");
        }
    }

    async fn heartbeat(&mut self, refresh_status: bool) {
        if self.nodes.is_empty() {
            return;
        }
        let running = match self.instances.states().await {
            Ok(states) => states,
            Err(error) => {
                warn!(%error, "Listing simulated instances failed.");
                return;
            }
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
        let stopped: std::collections::BTreeSet<String> =
            match nodes.list(&ListParams::default()).await {
                Ok(list) => list
                    .items
                    .into_iter()
                    .filter(|n| {
                        n.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(KUBELET_ANNOTATION))
                            .is_some_and(|v| v == "stopped")
                    })
                    .filter_map(|n| n.metadata.name)
                    .collect(),
                Err(error) => {
                    debug!(%error, "Listing Nodes for the simulated kubelets failed.");
                    Default::default()
                }
            };
        let registered: Vec<(String, String)> = self
            .nodes
            .iter()
            .map(|(i, n)| (i.clone(), n.clone()))
            .collect();
        for (instance_id, node) in registered {
            if running.get(&instance_id) != Some(&InstanceState::Running) {
                // The instance is gone: so is its kubelet, and the cloud's node controller
                // deletes the Node.
                match nodes.delete(&node, &DeleteParams::default()).await {
                    Ok(_) => info!(node, "Simulated Node deleted with its instance."),
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(error) => {
                        warn!(node, %error, "Deleting the simulated Node failed.");
                        continue;
                    }
                }
                self.delete_pods_of(&node).await;
                self.nodes.remove(&instance_id);
                self.node_ips.remove(&node);
                continue;
            }
            if stopped.contains(&node) {
                debug!(node, "Simulated kubelet stopped: no heartbeat.");
                continue;
            }
            self.renew_lease(&node).await;
            if refresh_status {
                // Merged by type, so the transition time already there stays.
                let mut condition = ready_condition();
                if let Some(c) = condition.as_object_mut() {
                    c.remove("lastTransitionTime");
                }
                let patch = json!({"status": {"conditions": [condition]}});
                if let Err(error) = nodes
                    .patch_status(&node, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    debug!(node, %error, "Refreshing the simulated Node's Ready condition failed.");
                }
            }
        }
    }
}
