//! [`KubeCluster`]: the [`Cluster`] port over a Kubernetes API server. Reads come from the
//! watch caches ([`Caches`]); writes go to the API server: NodeClaims by server-side apply
//! under one field manager, Nodes by merge patches guarded by their resource version,
//! evictions through the Eviction API, Events through `events.k8s.io`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod as KubePod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use karpenter_core::api::registration::register;
use karpenter_core::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use karpenter_core::model::Pod;
use karpenter_core::model::volumes::StorageView;
use karpenter_core::ports::{
    BoxFuture, BufferStatus, Cluster, ClusterError, DisruptionView, EventObject, EvictError,
    NodeInfo, PodToDrain,
};
use karpenter_core::scheduling::buffers::BufferSource;
use karpenter_core::vocab::labels;
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use serde_json::json;
use tracing::warn;

use super::convert;
use super::events::Publisher;

/// The field manager every write of this controller uses.
pub const FIELD_MANAGER: &str = "karpenter-rs";

/// How many times a guarded write re-reads and retries after a conflict.
const CONFLICT_RETRIES: usize = 5;

/// The watch caches: what the API server last said about each object the controller reads.
#[derive(Clone)]
pub struct Caches {
    /// Pods.
    pub pods: Store<KubePod>,
    /// Nodes.
    pub nodes: Store<Node>,
    /// Namespaces.
    pub namespaces: Store<Namespace>,
    /// DaemonSets.
    pub daemonsets: Store<DaemonSet>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// PersistentVolumeClaims.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub pvs: Store<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Store<StorageClass>,
    /// CSINodes.
    pub csinodes: Store<CSINode>,
    /// VolumeAttachments.
    pub volume_attachments: Store<VolumeAttachment>,
    /// NodePools.
    pub nodepools: Store<NodePool>,
    /// NodeClaims.
    pub nodeclaims: Store<NodeClaim>,
    /// EC2NodeClasses.
    pub nodeclasses: Store<EC2NodeClass>,
    /// NodeOverlays, watched only with the `NodeOverlay` feature gate on.
    pub overlays: Option<Store<NodeOverlay>>,
}

impl Caches {
    /// The storage objects `pod`'s volumes name.
    pub fn storage_for(&self, pod: &KubePod) -> StorageView {
        convert::storage_for(
            pod,
            |ns, name| {
                self.pvcs
                    .get(&ObjectRef::new(name).within(ns))
                    .map(|p| (*p).clone())
            },
            |name| self.pvs.get(&ObjectRef::new(name)).map(|p| (*p).clone()),
            |name| {
                self.storage_classes
                    .get(&ObjectRef::new(name))
                    .map(|p| (*p).clone())
            },
        )
    }

    /// The scheduler's view of a pending pod, with its volume topology.
    pub fn model_pod(&self, pod: &KubePod) -> Result<Pod, karpenter_core::model::pod::PodError> {
        Ok(Pod::try_from(pod)?.with_volume_topology(pod, &self.storage_for(pod)))
    }

    /// A NodeClaim by name.
    pub fn nodeclaim(&self, name: &str) -> Option<NodeClaim> {
        self.nodeclaims
            .get(&ObjectRef::new(name))
            .map(|c| (*c).clone())
    }

    /// The NodeClaim whose instance has this provider id.
    pub fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<NodeClaim> {
        self.nodeclaims
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
            .map(|c| (*c).clone())
    }

    /// A Node by name.
    pub fn node(&self, name: &str) -> Option<Node> {
        self.nodes.get(&ObjectRef::new(name)).map(|n| (*n).clone())
    }

    fn pods_on(&self, node: &str) -> Vec<Arc<KubePod>> {
        self.pods
            .state_filter(|p| convert::node_of(p) == Some(node))
    }
}

/// The cluster port over kube-rs.
pub struct KubeCluster {
    client: Client,
    caches: Caches,
    events: Publisher,
    now_ms: Box<dyn Fn() -> i64 + Send + Sync>,
    /// CapacityBuffers as last listed, with what they referred to (by `namespace/name`).
    buffers: std::sync::Mutex<(Vec<BufferSource>, BTreeMap<String, CapacityBuffer>)>,
}

fn api_error(object: &str, error: &kube::Error) -> ClusterError {
    match error {
        kube::Error::Api(status) if status.is_conflict() => ClusterError::Conflict {
            object: object.to_owned(),
            message: status.message.clone(),
        },
        other => ClusterError::Other {
            object: object.to_owned(),
            message: other.to_string(),
        },
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_not_found())
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_conflict())
}

impl KubeCluster {
    /// A cluster reading from `caches` and writing through `client`; Events are published
    /// by a task started here, as `reporter` ([`Publisher`]).
    pub fn new(client: Client, caches: Caches, reporter: Reporter) -> Self {
        KubeCluster {
            events: Publisher::start(client.clone(), reporter),
            client,
            caches,
            now_ms: Box::new(|| jiff::Timestamp::now().as_millisecond()),
            buffers: Default::default(),
        }
    }

    /// The caches it reads.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    fn reference(&self, object: &EventObject) -> ObjectReference {
        let (api_version, namespace, name, uid) = match object {
            EventObject::Pod { namespace, name } => {
                let uid = self
                    .caches
                    .pods
                    .get(&ObjectRef::new(name).within(namespace))
                    .and_then(|p| p.metadata.uid.clone());
                ("v1", Some(namespace.clone()), name.clone(), uid)
            }
            EventObject::Node(name) => {
                let uid = self.caches.node(name).and_then(|n| n.metadata.uid);
                ("v1", None, name.clone(), uid)
            }
            EventObject::NodeClaim(name) => {
                let uid = self.caches.nodeclaim(name).and_then(|c| c.metadata.uid);
                ("karpenter.sh/v1", None, name.clone(), uid)
            }
            EventObject::NodePool(name) => {
                let uid = self
                    .caches
                    .nodepools
                    .get(&ObjectRef::new(name))
                    .and_then(|p| p.metadata.uid.clone());
                ("karpenter.sh/v1", None, name.clone(), uid)
            }
            EventObject::EC2NodeClass(name) => {
                let uid = self
                    .caches
                    .nodeclasses
                    .get(&ObjectRef::new(name))
                    .and_then(|c| c.metadata.uid.clone());
                ("karpenter.k8s.aws/v1", None, name.clone(), uid)
            }
        };
        ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(object.kind().to_owned()),
            namespace,
            name: Some(name),
            uid,
            ..ObjectReference::default()
        }
    }

    /// Patches a Node with `change` applied to its current state, guarded by its resource
    /// version and retried on conflicts. Not found is success (the node is gone).
    async fn patch_node(
        &self,
        name: &str,
        mut change: impl FnMut(&Node) -> Option<serde_json::Value>,
    ) -> Result<Option<Node>, kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        for _ in 0..CONFLICT_RETRIES {
            let Some(node) = nodes.get_opt(name).await? else {
                return Ok(None);
            };
            let Some(mut patch) = change(&node) else {
                return Ok(Some(node));
            };
            patch["metadata"]["resourceVersion"] = json!(node.metadata.resource_version);
            match nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(node) => return Ok(Some(node)),
                Err(e) if is_conflict(&e) => continue,
                Err(e) if is_not_found(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(kube::Error::Api(
            kube::core::Status::failure(
                &format!("node {name} kept changing while it was patched"),
                "Conflict",
            )
            .with_code(409)
            .boxed(),
        ))
    }

    /// Why a new NodeClaim must not be created: its owning NodePool is not in the cache, is
    /// being deleted, or is another object of the same name than the one it was planned in.
    fn missing_owner(&self, claim: &NodeClaim) -> Option<String> {
        let owner = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "NodePool")?;
        match self.caches.nodepools.get(&ObjectRef::new(&owner.name)) {
            None => Some(format!("NodePool {} was deleted", owner.name)),
            Some(pool) if pool.metadata.deletion_timestamp.is_some() => {
                Some(format!("NodePool {} is being deleted", owner.name))
            }
            Some(pool)
                if !owner.uid.is_empty()
                    && pool.metadata.uid.as_deref() != Some(owner.uid.as_str()) =>
            {
                Some(format!(
                    "NodePool {} was deleted and created again",
                    owner.name
                ))
            }
            Some(_) => None,
        }
    }

    /// Marks a registered Node `karpenter.sh/initialized=true`, as upstream does once it
    /// has initialized.
    pub async fn label_initialized(&self, node: &str) -> Result<(), kube::Error> {
        self.patch_node(node, |n| {
            let done = n
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(labels::INITIALIZED).is_some_and(|v| v == "true"));
            (!done).then(|| json!({"metadata": {"labels": {labels::INITIALIZED: "true"}}}))
        })
        .await
        .map(|_| ())
    }
}

impl Cluster for KubeCluster {
    fn nodes(&self) -> BoxFuture<'_, Vec<NodeInfo>> {
        Box::pin(async move {
            let mut by_node: BTreeMap<String, Vec<Arc<KubePod>>> = BTreeMap::new();
            for pod in self.caches.pods.state() {
                if let Some(node) = convert::node_of(&pod) {
                    by_node
                        .entry(node.to_owned())
                        .or_default()
                        .push(pod.clone());
                }
            }
            self.caches
                .nodes
                .state()
                .iter()
                .map(|node| {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let pods = by_node.remove(&name).unwrap_or_default();
                    let refs: Vec<&KubePod> = pods.iter().map(|p| p.as_ref()).collect();
                    let mut storage = StorageView::default();
                    for pod in &refs {
                        let view = self.caches.storage_for(pod);
                        storage.claims.extend(view.claims);
                        storage.volumes.extend(view.volumes);
                        storage.classes.extend(view.classes);
                    }
                    let csinode = self.caches.csinodes.get(&ObjectRef::new(&name));
                    convert::node_info(node, &refs, &storage, csinode.as_deref())
                })
                .collect()
        })
    }

    fn pods_to_drain<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Vec<PodToDrain>> {
        Box::pin(async move {
            let pods = self.caches.pods_on(node);
            let refs: Vec<&KubePod> = pods.iter().map(|p| p.as_ref()).collect();
            convert::pods_to_drain(&refs, (self.now_ms)())
        })
    }

    fn capacity_buffers(&self) -> BoxFuture<'_, Vec<BufferSource>> {
        Box::pin(async move {
            match super::buffers::list(&self.client).await {
                Ok(listed) => {
                    let sources = listed.0.clone();
                    *self.buffers.lock().unwrap_or_else(|e| e.into_inner()) = listed;
                    sources
                }
                Err(error) => {
                    let not_installed = matches!(&error, kube::Error::Api(s) if s.is_not_found());
                    if not_installed {
                        warn!(
                            "The CapacityBuffer gate is on but the API server serves no capacitybuffers.autoscaling.x-k8s.io: install its CRD (deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml, in the chart's crds/)."
                        );
                    } else {
                        warn!(%error, "Listing CapacityBuffers failed; keeping those last read.");
                    }
                    (self.buffers.lock().unwrap_or_else(|e| e.into_inner()).0).clone()
                }
            }
        })
    }

    fn buffer_status(&self, status: &BufferStatus) {
        let key = status.resolved.key();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_millisecond((self.now_ms)()).unwrap_or_default(),
        );
        let patch = {
            let mut kept = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
            let Some(current) = kept.1.get_mut(&key) else {
                return;
            };
            let Some(patch) = super::buffers::status_patch(current, status, &now) else {
                return;
            };
            // Written as it will be, so the next round's word is compared with it.
            if let Ok(written) = serde_json::from_value(patch["status"].clone()) {
                current.status = Some(written);
            }
            patch
        };
        let client = self.client.clone();
        let (namespace, name) = (
            status.resolved.namespace.clone(),
            status.resolved.name.clone(),
        );
        tokio::spawn(async move {
            let object = (namespace.clone(), name.clone());
            if let Err(error) =
                super::buffers::write_status(client, object, patch, FIELD_MANAGER).await
            {
                warn!(capacitybuffer = %format!("{namespace}/{name}"), %error, "Writing a CapacityBuffer's status failed; the next round writes it again.");
            }
        });
    }

    fn daemonsets(&self) -> BoxFuture<'_, Vec<Pod>> {
        Box::pin(async move {
            self.caches
                .daemonsets
                .state()
                .iter()
                .filter_map(|ds| {
                    let template = ds.spec.as_ref()?.template.clone();
                    let mut metadata = template.metadata.unwrap_or_default();
                    metadata.namespace = ds.metadata.namespace.clone();
                    metadata.name = ds.metadata.name.clone();
                    metadata.uid = ds.metadata.uid.clone();
                    let pod = KubePod {
                        metadata,
                        spec: template.spec,
                        status: None,
                    };
                    match Pod::try_from(&pod) {
                        Ok(p) => Some(p),
                        Err(error) => {
                            warn!(daemonset = ?ds.metadata.name, %error, "DaemonSet template not understood; its overhead is not counted.");
                            None
                        }
                    }
                })
                .collect()
        })
    }

    fn namespace_labels(&self) -> BoxFuture<'_, BTreeMap<String, BTreeMap<String, String>>> {
        Box::pin(async move {
            self.caches
                .namespaces
                .state()
                .iter()
                .map(|ns| {
                    (
                        ns.metadata.name.clone().unwrap_or_default(),
                        ns.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .collect()
        })
    }

    fn sync_node<'a>(
        &'a self,
        node: &'a str,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            // The owner reference needs the object's uid, which only the API server knows.
            let mut claim = claim.clone();
            if claim.metadata.uid.is_none() {
                let name = claim.metadata.name.clone().unwrap_or_default();
                let api: Api<NodeClaim> = Api::all(self.client.clone());
                match api.get_opt(&name).await {
                    Ok(Some(stored)) => claim.metadata.uid = stored.metadata.uid,
                    Ok(None) => {}
                    Err(error) => {
                        warn!(nodeclaim = %name, %error, "Reading the NodeClaim for its uid failed.")
                    }
                }
            }
            let mut missing_taint = false;
            let result = self
                .patch_node(node, |n| {
                    let registered = register(&claim, n);
                    missing_taint = registered.unregistered_taint_missing;
                    Some(json!({
                        "metadata": {
                            "labels": registered.labels,
                            "annotations": registered.annotations,
                            "finalizers": registered.finalizers,
                            "ownerReferences": registered.owner_references,
                        },
                        "spec": {"taints": registered.taints},
                    }))
                })
                .await;
            let synced = result.map_err(|error| api_error(&format!("Node/{node}"), &error))?;
            if synced.is_some() && missing_taint {
                self.emit_event(
                    &EventObject::Node(node.to_owned()),
                    "UnregisteredTaintMissing",
                    &format!(
                        "Node {node} joined without the {} taint; pods may have been scheduled before it was synced",
                        labels::UNREGISTERED_TAINT
                    ),
                );
            }
            Ok(())
        })
    }

    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let result = self
                .patch_node(node, |n| {
                    let mut taints = n
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.clone())
                        .unwrap_or_default();
                    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT) {
                        taints.push(k8s_openapi::api::core::v1::Taint {
                            key: labels::DISRUPTED_TAINT.to_owned(),
                            effect: "NoSchedule".to_owned(),
                            ..Default::default()
                        });
                    }
                    Some(json!({"spec": {"unschedulable": true, "taints": taints}}))
                })
                .await;
            result.map(|_| ()).map_err(|error| ClusterError::Other {
                object: format!("Node/{node}"),
                message: error.to_string(),
            })
        })
    }

    fn taint_disrupted<'a>(
        &'a self,
        node: &'a str,
        disrupted: bool,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let result = self
                .patch_node(node, |n| {
                    let taints = n
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.clone())
                        .unwrap_or_default();
                    let has = taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT);
                    if has == disrupted {
                        return None;
                    }
                    let mut taints: Vec<_> = taints
                        .into_iter()
                        .filter(|t| t.key != labels::DISRUPTED_TAINT)
                        .collect();
                    if disrupted {
                        taints.push(k8s_openapi::api::core::v1::Taint {
                            key: labels::DISRUPTED_TAINT.to_owned(),
                            effect: "NoSchedule".to_owned(),
                            ..Default::default()
                        });
                    }
                    Some(json!({"spec": {"taints": taints}}))
                })
                .await;
            result.map(|_| ()).map_err(|error| ClusterError::Other {
                object: format!("Node/{node}"),
                message: error.to_string(),
            })
        })
    }

    fn evict<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            let Some(pod) = self
                .caches
                .pods
                .find(|p| p.metadata.uid.as_deref() == Some(uid))
            else {
                return Ok(());
            };
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let pods: Api<KubePod> = Api::namespaced(self.client.clone(), &namespace);
            match pods.evict(&name, &EvictParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 429 => {
                    Err(EvictError::BlockedByPdb {
                        pod: format!("{namespace}/{name}"),
                        pdb: status.message.clone(),
                    })
                }
                Err(e) => Err(EvictError::Other(e.to_string())),
            }
        })
    }

    fn volumes_attached<'a>(&'a self, node: &'a str) -> BoxFuture<'a, usize> {
        Box::pin(async move {
            // Volumes of pods the drain leaves on the node (they tolerate the disrupted taint,
            // or are static) stay attached until the end; waiting for them would never end.
            let now = (self.now_ms)();
            let staying: std::collections::BTreeSet<String> = self
                .caches
                .pods_on(node)
                .iter()
                .filter(|p| {
                    matches!(
                        karpenter_core::model::drain::drain_action(p, now),
                        karpenter_core::model::drain::DrainAction::Skip(_)
                    )
                })
                .flat_map(|p| {
                    let storage = self.caches.storage_for(p);
                    storage
                        .claims
                        .into_values()
                        .filter_map(|c| c.spec?.volume_name)
                        .collect::<Vec<_>>()
                })
                .collect();
            self.caches
                .volume_attachments
                .state()
                .iter()
                .filter(|va| va.spec.node_name == node)
                .filter(|va| {
                    va.spec
                        .source
                        .persistent_volume_name
                        .as_ref()
                        .is_none_or(|pv| !staying.contains(pv))
                })
                .count()
        })
    }

    fn delete_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let object = format!("Node/{node}");
            let nodes: Api<Node> = Api::all(self.client.clone());
            match nodes.delete(node, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(error) => return Err(api_error(&object, &error)),
            }
            // The termination finalizer held it for the drain, which is over.
            let result = self
                .patch_node(node, |n| {
                    let finalizers = n.metadata.finalizers.clone().unwrap_or_default();
                    let kept: Vec<&String> = finalizers
                        .iter()
                        .filter(|f| *f != labels::TERMINATION_FINALIZER)
                        .collect();
                    (kept.len() != finalizers.len())
                        .then(|| json!({"metadata": {"finalizers": kept}}))
                })
                .await;
            result
                .map(|_| ())
                .map_err(|error| api_error(&object, &error))
        })
    }

    fn put_nodeclaim<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let name = claim.metadata.name.clone().unwrap_or_default();
            let object = format!("NodeClaim/{name}");
            let api: Api<NodeClaim> = Api::all(self.client.clone());
            if self.caches.nodeclaim(&name).is_none()
                && let Some(gone) = self.missing_owner(claim)
            {
                return Err(ClusterError::Gone {
                    object,
                    message: gone,
                });
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let mut body = serde_json::to_value(claim).map_err(|e| ClusterError::Other {
                object: object.clone(),
                message: e.to_string(),
            })?;
            let status = body.as_object_mut().and_then(|o| o.remove("status"));
            api.patch(&name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| api_error(&object, &e))?;
            if let Some(status) = status {
                let status_body = json!({
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodeClaim",
                    "metadata": {"name": name},
                    "status": status,
                });
                api.patch_status(&name, &params, &Patch::Apply(&status_body))
                    .await
                    .map_err(|e| api_error(&object, &e))?;
            }
            Ok(())
        })
    }

    fn release_nodeclaim<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let object = format!("NodeClaim/{name}");
            let api: Api<NodeClaim> = Api::all(self.client.clone());
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(api_error(&object, &e)),
            }
            for _ in 0..CONFLICT_RETRIES {
                let claim = match api.get_opt(name).await {
                    Ok(Some(c)) => c,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(api_error(&object, &e)),
                };
                let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
                let kept: Vec<&String> = finalizers
                    .iter()
                    .filter(|f| *f != labels::TERMINATION_FINALIZER)
                    .collect();
                if kept.len() == finalizers.len() {
                    return Ok(());
                }
                let patch = json!({"metadata": {
                    "resourceVersion": claim.metadata.resource_version,
                    "finalizers": kept,
                }});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e) if is_not_found(&e) => return Ok(()),
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(api_error(&object, &e)),
                }
            }
            Err(ClusterError::Conflict {
                object,
                message: "kept changing while its finalizer was removed".into(),
            })
        })
    }

    fn disruption_view(&self) -> BoxFuture<'_, DisruptionView> {
        Box::pin(async move {
            let now_ms = (self.now_ms)();
            let pdbs = self.caches.pdbs.state();
            let pdb_refs: Vec<&PodDisruptionBudget> = pdbs.iter().map(|p| p.as_ref()).collect();
            let pods = self
                .caches
                .pods
                .state()
                .iter()
                .filter(|p| convert::occupies_node(p))
                .filter_map(|pod| {
                    let node = convert::node_of(pod)?;
                    let model = self.caches.model_pod(pod).map_err(|e| e.to_string());
                    Some(convert::bound_pod(pod, node, model, &pdb_refs, now_ms))
                })
                .collect();
            let nodes = self.caches.nodes.state();
            let protected = nodes
                .iter()
                .filter(|n| convert::protected(&n.metadata))
                .filter_map(|n| n.metadata.name.clone())
                .chain(
                    self.caches
                        .nodeclaims
                        .state()
                        .iter()
                        .filter(|c| convert::protected(&c.metadata))
                        .filter_map(|c| c.metadata.name.clone()),
                )
                .collect();
            DisruptionView {
                pods,
                pdbs: pdb_refs
                    .iter()
                    .map(|p| (convert::pdb_key(p), convert::pdb_allowed(p)))
                    .collect(),
                protected,
                not_ready: nodes
                    .iter()
                    .filter(|n| !convert::is_ready(n))
                    .filter_map(|n| n.metadata.name.clone())
                    .collect(),
                conditions: nodes
                    .iter()
                    .filter_map(|n| {
                        let conditions = convert::repair_conditions(n);
                        (!conditions.is_empty())
                            .then(|| Some((n.metadata.name.clone()?, conditions)))
                            .flatten()
                    })
                    .collect(),
            }
        })
    }

    fn emit_event(&self, object: &EventObject, reason: &str, message: &str) {
        let warning = matches!(
            reason,
            "FailedScheduling"
                | "DisruptionBlocked"
                | "InsufficientCapacityError"
                | "UnregisteredTaintMissing"
                | "NodeClassNotReady"
                | "FailedDraining"
                | "TerminationGracePeriodExpiring"
                | "InvalidNodePool"
                | "NodeRepairBlocked"
                | karpenter_core::api::unsupported::REASON
        );
        self.events
            .record(self.reference(object), warning, reason, message);
    }
}
