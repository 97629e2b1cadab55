//! CapacityBuffers on a Kubernetes API server (`CapacityBuffer` gate): each round lists them
//! and reads what each refers to (a PodTemplate, or an `apps` Deployment, StatefulSet or
//! ReplicaSet in its namespace), as upstream's provisioner does; statuses are written back
//! with merge patches of the status subresource, only when they change. A listing that
//! fails keeps the buffers last read (their headroom is not given up for an API hiccup).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod as KubePod, PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use karpenter_core::api::CapacityBuffer;
use karpenter_core::model::Pod;
use karpenter_core::ports::BufferStatus;
use karpenter_core::scheduling::buffers::{
    BufferSource, ConditionState, Found, PROVISIONING, READY_FOR_PROVISIONING, WorkloadKind,
    workload_kind,
};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// The pod a template stands for, named after its owner.
fn template_pod(
    template: Option<&PodTemplateSpec>,
    namespace: &str,
    name: &str,
) -> Result<Pod, String> {
    let template = template.ok_or_else(|| format!("{name} has no pod template"))?;
    let mut metadata = template.metadata.clone().unwrap_or_default();
    metadata.namespace = Some(namespace.to_owned());
    metadata.name = Some(name.to_owned());
    metadata.uid = Some(format!("template/{namespace}/{name}"));
    let pod = KubePod {
        metadata,
        spec: template.spec.clone(),
        status: None,
    };
    Pod::try_from(&pod).map_err(|e| format!("the pod template of {name} is not understood: {e}"))
}

fn found<T>(result: Result<T, kube::Error>, read: impl FnOnce(T) -> Found) -> Found {
    match result {
        Ok(object) => read(object),
        Err(kube::Error::Api(status)) if status.is_not_found() => Found::NotFound,
        Err(error) => Found::Failed(error.to_string()),
    }
}

/// What `buffer`'s reference is in the cluster.
async fn resolve(client: &Client, buffer: &CapacityBuffer) -> Found {
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(reference) = &buffer.spec.pod_template_ref {
        let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
        return found(api.get(&reference.name).await, |t| {
            match template_pod(t.template.as_ref(), namespace, &reference.name) {
                Ok(pod) => Found::PodTemplate {
                    pod: Box::new(pod),
                    generation: t.metadata.generation.unwrap_or(0),
                },
                Err(why) => Found::Failed(format!("spec.podTemplateRef: {why}")),
            }
        });
    }
    let Some(reference) = &buffer.spec.scalable_ref else {
        return Found::NotFound;
    };
    let name = reference.name.as_str();
    match workload_kind(reference) {
        Err(why) => Found::Failed(why),
        Ok(WorkloadKind::Deployment) => {
            read_workload::<Deployment>(client, namespace, name, |d| {
                let spec = d.spec.as_ref();
                (spec.map(|s| &s.template), spec.and_then(|s| s.replicas))
            })
            .await
        }
        Ok(WorkloadKind::StatefulSet) => {
            read_workload::<StatefulSet>(client, namespace, name, |s| {
                let spec = s.spec.as_ref();
                (spec.map(|s| &s.template), spec.and_then(|s| s.replicas))
            })
            .await
        }
        Ok(WorkloadKind::ReplicaSet) => {
            read_workload::<ReplicaSet>(client, namespace, name, |r| {
                let spec = r.spec.as_ref();
                (
                    spec.and_then(|s| s.template.as_ref()),
                    spec.and_then(|s| s.replicas),
                )
            })
            .await
        }
    }
}

/// A workload of kind `K`: its pod template and `spec.replicas`, as `parts` finds them.
async fn read_workload<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    parts: impl FnOnce(&K) -> (Option<&PodTemplateSpec>, Option<i32>),
) -> Found
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    found(api.get(name).await, |w| {
        let (template, replicas) = parts(&w);
        match template_pod(template, namespace, name) {
            Ok(pod) => Found::Workload {
                pod: Box::new(pod),
                replicas,
            },
            Err(why) => Found::Failed(format!("spec.scalableRef: {why}")),
        }
    })
}

/// Every CapacityBuffer with what its reference is, and the objects as listed (by
/// `namespace/name`).
pub async fn list(
    client: &Client,
) -> Result<(Vec<BufferSource>, BTreeMap<String, CapacityBuffer>), kube::Error> {
    let api: Api<CapacityBuffer> = Api::all(client.clone());
    let listed = api.list(&ListParams::default()).await?;
    let mut sources = Vec::new();
    let mut objects = BTreeMap::new();
    for buffer in listed.items {
        let source = BufferSource {
            namespace: buffer
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: buffer.metadata.name.clone().unwrap_or_default(),
            generation: buffer.metadata.generation.unwrap_or(0),
            spec: buffer.spec.clone(),
            found: resolve(client, &buffer).await,
        };
        objects.insert(source.key(), buffer);
        sources.push(source);
    }
    Ok((sources, objects))
}

/// `conditions` with `state` set as condition `type_`: its transition time kept while its
/// status does not change.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    state: &ConditionState,
    generation: i64,
    now: &Time,
) {
    let status = if state.status { "True" } else { "False" };
    let since = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: state.reason.to_owned(),
        message: state.message.clone(),
        observed_generation: Some(generation),
        last_transition_time: since,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// The status merge patch that brings `current` to what `status` says, or `None` when it
/// says it already.
pub fn status_patch(
    current: &CapacityBuffer,
    status: &BufferStatus,
    now: &Time,
) -> Option<serde_json::Value> {
    let old = current.status.clone().unwrap_or_default();
    let resolved = &status.resolved;
    let mut conditions = old.conditions.clone();
    set_condition(
        &mut conditions,
        READY_FOR_PROVISIONING,
        &resolved.ready,
        resolved.generation,
        now,
    );
    if let Some(provisioning) = &status.provisioning {
        set_condition(
            &mut conditions,
            PROVISIONING,
            provisioning,
            resolved.generation,
            now,
        );
    }
    let pod_template_ref = resolved
        .pod_template
        .as_ref()
        .map(|name| karpenter_core::api::capacitybuffer::LocalObjectRef { name: name.clone() });
    let mut sorted_old = old.conditions.clone();
    sorted_old.sort_by(|a, b| a.type_.cmp(&b.type_));
    let unchanged = sorted_old == conditions
        && old.replicas == resolved.replicas
        && old.pod_template_ref == pod_template_ref
        && old.pod_template_generation == resolved.pod_template_generation
        && old.provisioning_strategy.as_deref() == Some(resolved.strategy.as_str());
    (!unchanged).then(|| {
        json!({"status": {
            "conditions": conditions,
            "replicas": resolved.replicas,
            "podTemplateRef": pod_template_ref,
            "podTemplateGeneration": resolved.pod_template_generation,
            "provisioningStrategy": resolved.strategy,
        }})
    })
}

/// Writes `patch` to the buffer's status as `field_manager`.
pub async fn write_status(
    client: Client,
    (namespace, name): (String, String),
    patch: serde_json::Value,
    field_manager: &str,
) -> Result<(), kube::Error> {
    let api: Api<CapacityBuffer> = Api::namespaced(client, &namespace);
    api.patch_status(
        &name,
        &PatchParams {
            field_manager: Some(field_manager.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}
