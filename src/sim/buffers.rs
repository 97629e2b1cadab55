//! CapacityBuffers in scenarios: their references checked before a run (a buffer naming a
//! PodTemplate or Deployment the scenario does not have is an error naming the field), and
//! resolved against the simulated cluster's PodTemplates and Deployments while it runs.
//! PodTemplates and Deployments live in namespace `default`.

use std::collections::BTreeMap;

use karpenter_core::api::CapacityBuffer;
use karpenter_core::model::Pod;
use karpenter_core::scheduling::buffers::{BufferSource, Found, WorkloadKind, workload_kind};

/// The namespace scenario workloads live in.
const NAMESPACE: &str = "default";

fn label(buffer: &CapacityBuffer) -> String {
    format!(
        "manifests: CapacityBuffer/{}/{}",
        buffer.metadata.namespace.as_deref().unwrap_or(NAMESPACE),
        buffer.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Adds to `problems` every buffer reference the scenario cannot resolve: `templates` and
/// `deployments` are the names it defines.
pub(super) fn check(
    templates: &[&str],
    deployments: &[&str],
    buffers: &[CapacityBuffer],
    problems: &mut Vec<String>,
) {
    for buffer in buffers {
        let at = label(buffer);
        let namespace = buffer.metadata.namespace.as_deref().unwrap_or(NAMESPACE);
        if namespace != NAMESPACE {
            problems.push(format!(
                "{at}: metadata.namespace: scenario PodTemplates and Deployments live in namespace {NAMESPACE:?}; put the buffer there"
            ));
        }
        if let Some(reference) = &buffer.spec.pod_template_ref
            && !templates.contains(&reference.name.as_str())
        {
            problems.push(format!(
                "{at}: spec.podTemplateRef.name: no PodTemplate {:?} in podTemplates; define it there or name one that exists ({})",
                reference.name,
                names(templates)
            ));
        }
        if let Some(reference) = &buffer.spec.scalable_ref {
            match workload_kind(reference) {
                Err(why) => problems.push(format!("{at}: {why}")),
                Ok(WorkloadKind::Deployment) => {
                    if !deployments.contains(&reference.name.as_str()) {
                        problems.push(format!(
                            "{at}: spec.scalableRef.name: no Deployment {:?} in deployments; name one that exists ({})",
                            reference.name,
                            names(deployments)
                        ));
                    }
                }
                Ok(_) => problems.push(format!(
                    "{at}: spec.scalableRef.kind: scenarios have Deployments only; name a Deployment"
                )),
            }
        }
    }
}

fn names(names: &[&str]) -> String {
    if names.is_empty() {
        "there are none".into()
    } else {
        format!("there are {}", names.join(", "))
    }
}

/// Each buffer with what its reference is in the running cluster: `templates` by name,
/// `deployments` by name with their replicas now.
pub(super) fn sources(
    buffers: &[CapacityBuffer],
    templates: &BTreeMap<String, Pod>,
    deployments: &BTreeMap<String, (Pod, usize)>,
) -> Vec<BufferSource> {
    buffers
        .iter()
        .map(|b| {
            let found = match (&b.spec.pod_template_ref, &b.spec.scalable_ref) {
                (Some(reference), _) => match templates.get(&reference.name) {
                    Some(pod) => Found::PodTemplate {
                        pod: Box::new(pod.clone()),
                        generation: 1,
                    },
                    None => Found::NotFound,
                },
                (None, Some(reference)) => match workload_kind(reference) {
                    Err(why) => Found::Failed(why),
                    Ok(WorkloadKind::Deployment) => match deployments.get(&reference.name) {
                        Some((pod, replicas)) => Found::Workload {
                            pod: Box::new(pod.clone()),
                            replicas: Some(i32::try_from(*replicas).unwrap_or(i32::MAX)),
                        },
                        None => Found::NotFound,
                    },
                    Ok(_) => Found::NotFound,
                },
                (None, None) => Found::NotFound,
            };
            BufferSource {
                namespace: b
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| NAMESPACE.into()),
                name: b.metadata.name.clone().unwrap_or_default(),
                generation: b.metadata.generation.unwrap_or(1),
                spec: b.spec.clone(),
                found,
            }
        })
        .collect()
}
