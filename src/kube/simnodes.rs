//! Nodes for the in-memory cloud in a real cluster (`controller --cloud sim`): each instance
//! that boots registers a Node object the way a kubelet would (provider id, the
//! `karpenter.sh/unregistered` taint, capacity and allocatable and labels from the catalog),
//! and is then kept alive the way kwok keeps its nodes: its Lease in `kube-node-lease` is
//! renewed and its `Ready` condition refreshed, so a real control plane's node lifecycle
//! controller never marks it NotReady. When the instance goes, so does the Node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use karpenter_actors::api::labels;
use karpenter_actors::model::InstanceType;
use karpenter_actors::ports::{CloudProvider, Instance, InstanceState};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::sim::cloud::InstanceBooted;

/// How often a node's Lease is renewed (a kubelet's default).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How long a node Lease is valid (a kubelet's default).
const LEASE_SECONDS: i32 = 40;
/// How often the `Ready` condition's heartbeat is refreshed.
const STATUS_EVERY: Duration = Duration::from_secs(60);

/// The Node name an instance registers as.
pub fn node_name(instance: &Instance) -> String {
    format!("ip-{}.sim.internal", instance.id.trim_start_matches("i-"))
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// The Node object a kubelet on `instance` would register.
pub fn node_object(instance: &Instance, instance_type: &InstanceType) -> Node {
    let name = node_name(instance);
    let mut node_labels: BTreeMap<String, String> = instance_type.labels.clone();
    node_labels.insert(labels::ZONE.into(), instance.zone.clone());
    node_labels.insert(
        labels::CAPACITY_TYPE.into(),
        instance.capacity_type.as_str().into(),
    );
    node_labels.insert(labels::INSTANCE_TYPE.into(), instance.instance_type.clone());
    node_labels.insert(labels::NODEPOOL.into(), instance.nodepool.clone());
    node_labels.insert(labels::HOSTNAME.into(), name.clone());
    let quantities = |r: karpenter_actors::model::Resources| -> BTreeMap<String, String> {
        r.to_quantities()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    };
    let value = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {"karpenter-rs/simulated": "true"},
        },
        "spec": {
            "providerID": instance.provider_id,
            "taints": [{"key": labels::UNREGISTERED_TAINT, "effect": "NoExecute"}],
        },
        "status": {
            "capacity": quantities(instance_type.capacity),
            "allocatable": quantities(instance_type.allocatable()),
            "conditions": [ready_condition()],
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

/// Registers booted instances as Nodes and keeps them alive until their instance is gone.
pub struct SimNodes {
    client: Client,
    cloud: Arc<dyn CloudProvider>,
    /// Nodes registered, by instance id.
    nodes: BTreeMap<String, String>,
}

impl SimNodes {
    /// Nodes for `cloud`'s instances, written through `client`.
    pub fn new(client: Client, cloud: Arc<dyn CloudProvider>) -> Self {
        SimNodes {
            client,
            cloud,
            nodes: BTreeMap::new(),
        }
    }

    /// Runs until `booted` closes: registers each booted instance's Node, renews Leases,
    /// refreshes Ready, and deletes the Nodes of instances that are gone.
    pub async fn run(mut self, mut booted: mpsc::UnboundedReceiver<InstanceBooted>) {
        let mut renew = tokio::time::interval(LEASE_RENEW);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_status = tokio::time::Instant::now();
        loop {
            tokio::select! {
                next = booted.recv() => match next {
                    Some(b) => self.register(&b.instance, &b.instance_type).await,
                    None => return,
                },
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

    async fn register(&mut self, instance: &Instance, instance_type: &InstanceType) {
        if instance.state != InstanceState::Running {
            return;
        }
        let node = node_object(instance, instance_type);
        let name = node.metadata.name.clone().unwrap_or_default();
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
        let running: BTreeMap<String, InstanceState> = match self.cloud.list().await {
            Ok(list) => list.into_iter().map(|i| (i.id, i.state)).collect(),
            Err(error) => {
                warn!(%error, "Listing simulated instances failed.");
                return;
            }
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
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
                self.nodes.remove(&instance_id);
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
