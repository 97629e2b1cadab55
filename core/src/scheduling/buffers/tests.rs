//! Each test names the upstream case it paraphrases (`pkg/controllers/capacitybuffer` and
//! `pkg/controllers/provisioning/buffers_test.go`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;

use super::*;
use crate::api::capacitybuffer::{LocalObjectRef, ScalableRef};
use crate::scheduling::{Binding, PlannedNodeClaim, Unschedulable};

const GIB: i64 = 1 << 30;

fn chunk(cpu_millis: i64) -> Box<Pod> {
    Box::new(Pod::simple("template", cpu_millis, GIB))
}

fn template_buffer(name: &str, replicas: Option<i32>, limits: &[(&str, &str)]) -> BufferSource {
    BufferSource {
        namespace: "default".into(),
        name: name.into(),
        generation: 1,
        spec: CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef {
                name: format!("{name}-template"),
            }),
            replicas,
            limits: (!limits.is_empty()).then(|| {
                limits
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), KQuantity((*v).to_owned())))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..CapacityBufferSpec::default()
        },
        found: Found::PodTemplate {
            pod: chunk(1000),
            generation: 3,
        },
    }
}

fn workload_buffer(
    running: Option<i32>,
    replicas: Option<i32>,
    percentage: Option<i32>,
) -> BufferSource {
    BufferSource {
        namespace: "default".into(),
        name: "web".into(),
        generation: 1,
        spec: CapacityBufferSpec {
            scalable_ref: Some(ScalableRef {
                api_group: Some("apps".into()),
                kind: "Deployment".into(),
                name: "web".into(),
            }),
            replicas,
            percentage,
            ..CapacityBufferSpec::default()
        },
        found: Found::Workload {
            pod: chunk(1000),
            replicas: running,
        },
    }
}

#[test]
fn should_resolve_a_pod_template_and_set_ready_for_provisioning_true() {
    let r = resolve(&template_buffer("web", Some(5), &[]));
    assert!(r.ready.status);
    assert_eq!(r.ready.reason, "Resolved");
    assert_eq!(r.pod_template.as_deref(), Some("web-template"));
    assert_eq!(r.pod_template_generation, Some(3));
    assert_eq!(r.replicas, Some(5));
    assert_eq!(r.strategy, ACTIVE_CAPACITY);
    assert!(r.provisions());
}

#[test]
fn should_set_ready_for_provisioning_false_when_pod_template_is_not_found() {
    let mut source = template_buffer("web", Some(3), &[]);
    source.found = Found::NotFound;
    let r = resolve(&source);
    assert!(!r.ready.status);
    assert_eq!(r.ready.reason, "PodTemplateNotFound");
    assert!(
        r.ready
            .message
            .starts_with("spec.podTemplateRef.name: PodTemplate \"web-template\" not found"),
        "{}",
        r.ready.message
    );
    assert_eq!(r.replicas, None);
    assert!(virtual_pods(&r).is_empty());
    let condition = provisioning(&r, None).unwrap();
    assert_eq!(
        (condition.status, condition.reason),
        (false, "NotReadyForProvisioning")
    );
}

#[test]
fn should_resolve_a_deployment_and_calculate_percentage_based_replicas() {
    let r = resolve(&workload_buffer(Some(10), None, Some(20)));
    assert!(r.ready.status);
    assert_eq!(r.replicas, Some(2));
    // scalableRef does not set podTemplateRef in status.
    assert_eq!(r.pod_template, None);
}

#[test]
fn should_set_ready_for_provisioning_false_when_scalable_ref_is_not_found() {
    let mut source = workload_buffer(Some(10), Some(3), None);
    source.found = Found::NotFound;
    let r = resolve(&source);
    assert_eq!(r.ready.reason, "ScalableRefNotFound");
    assert!(
        r.ready
            .message
            .starts_with("spec.scalableRef.name: Deployment \"web\"")
    );
}

#[test]
fn should_return_error_for_unsupported_kind_and_api_group() {
    let job = ScalableRef {
        api_group: Some("batch".into()),
        kind: "Job".into(),
        name: "my-job".into(),
    };
    assert!(workload_kind(&job).unwrap_err().contains("batch/Job"));
    let grouped = ScalableRef {
        api_group: Some("batch".into()),
        kind: "Deployment".into(),
        name: "d".into(),
    };
    assert!(workload_kind(&grouped).is_err());
    for (group, kind, expected) in [
        (None, "Deployment", WorkloadKind::Deployment),
        (Some("apps"), "StatefulSet", WorkloadKind::StatefulSet),
        (Some(""), "ReplicaSet", WorkloadKind::ReplicaSet),
    ] {
        let r = ScalableRef {
            api_group: group.map(str::to_owned),
            kind: kind.into(),
            name: "w".into(),
        };
        assert_eq!(workload_kind(&r), Ok(expected));
    }
    let mut source = workload_buffer(Some(1), Some(1), None);
    source.found = Found::Failed(workload_kind(&job).unwrap_err());
    assert_eq!(resolve(&source).ready.reason, "ResolutionFailed");
}

#[test]
fn should_default_to_1_replica_when_workload_has_nil_spec_replicas() {
    assert_eq!(
        resolve(&workload_buffer(None, None, Some(100))).replicas,
        Some(1)
    );
}

#[test]
fn should_resolve_buffer_replicas_from_replicas_percentage_and_limits() {
    // podTemplateRef: replicas and limits only.
    let cases: Vec<(&str, BufferSource, i32)> = vec![
        ("fixed replicas only", template_buffer("a", Some(7), &[]), 7),
        (
            "replicas capped by binding limit",
            template_buffer("b", Some(10), &[("cpu", "3")]),
            3,
        ),
        (
            "non-binding limit does not reduce",
            template_buffer("c", Some(3), &[("cpu", "10")]),
            3,
        ),
        (
            "limits only",
            template_buffer("d", None, &[("cpu", "5")]),
            5,
        ),
        (
            "percentage only",
            workload_buffer(Some(10), None, Some(20)),
            2,
        ),
        (
            "replicas > percentage",
            workload_buffer(Some(10), Some(5), Some(20)),
            5,
        ),
        (
            "percentage > replicas",
            workload_buffer(Some(10), Some(5), Some(80)),
            8,
        ),
        (
            "percentage rounds up to a minimum of 1",
            workload_buffer(Some(1), None, Some(10)),
            1,
        ),
    ];
    for (name, source, expected) in cases {
        assert_eq!(resolve(&source).replicas, Some(expected), "{name}");
    }
    let mut capped = workload_buffer(Some(10), Some(5), Some(80));
    capped.spec.limits = Some(BTreeMap::from([("cpu".to_owned(), KQuantity("4".into()))]));
    assert_eq!(
        resolve(&capped).replicas,
        Some(4),
        "max of replicas and percentage capped by limit"
    );
    // A limit on a resource the chunk does not request does not constrain.
    let loose = template_buffer("e", Some(6), &[("nvidia.com/gpu", "1")]);
    assert_eq!(resolve(&loose).replicas, Some(6));
    // The least over resources: 8 cpu → 8, 3Gi → 3.
    let memory = template_buffer("f", None, &[("cpu", "8"), ("memory", "3Gi")]);
    assert_eq!(resolve(&memory).replicas, Some(3));
}

#[test]
fn should_create_the_correct_number_of_pods_with_expected_metadata() {
    let r = resolve(&template_buffer("web", Some(3), &[]));
    let pods = virtual_pods(&r);
    assert_eq!(pods.len(), 3);
    for (i, p) in pods.iter().enumerate() {
        let idx = i + 1;
        assert_eq!(p.name, format!("capacity-buffer-web-{idx}"));
        assert_eq!(p.namespace, "default");
        assert_eq!(p.uid, format!("capacity-buffer/default/web/{idx}"));
        assert_eq!(p.labels[BUFFER_NAME_LABEL], "web");
        assert_eq!(p.labels[BUFFER_NAMESPACE_LABEL], "default");
        assert_eq!(p.priority, VIRTUAL_POD_PRIORITY);
        assert!(is_virtual(p));
        assert_eq!(buffer_of(&p.uid).as_deref(), Some("default/web"));
    }
    // Deterministic across calls.
    assert_eq!(virtual_pods(&r), pods);
    assert!(!is_virtual(&Pod::simple("real", 100, GIB)));
}

#[test]
fn should_return_nil_for_zero_replicas() {
    let r = resolve(&template_buffer("web", Some(0), &[]));
    assert!(virtual_pods(&r).is_empty());
    let condition = provisioning(&r, None).unwrap();
    assert_eq!((condition.status, condition.reason), (false, "BufferEmpty"));
}

#[test]
fn should_drop_pvc_and_ephemeral_volumes() {
    let mut source = template_buffer("web", Some(1), &[]);
    let Found::PodTemplate { pod, .. } = &mut source.found else {
        unreachable!()
    };
    pod.volume_requirements = vec![crate::model::Requirements::default()];
    let pods = virtual_pods(&resolve(&source));
    assert!(pods[0].volume_requirements.is_empty());
}

fn result(existing: &[&str], new: &[&str], failed: &[(&str, &str)]) -> SchedulingResult {
    SchedulingResult {
        bindings: existing
            .iter()
            .map(|p| Binding {
                pod: (*p).to_owned(),
                node: "node-a".into(),
            })
            .collect(),
        new_claims: vec![PlannedNodeClaim {
            nodepool: "default".into(),
            requirements: crate::model::Requirements::default(),
            instance_types: Vec::new(),
            pods: new.iter().map(|p| (*p).to_owned()).collect(),
            requests: crate::model::Resources::ZERO,
            min_values_relaxed: false,
        }],
        unschedulable: failed
            .iter()
            .map(|(p, reason)| Unschedulable {
                pod: (*p).to_owned(),
                reason: (*reason).to_owned(),
            })
            .collect(),
    }
}

#[test]
fn should_bucket_virtual_pods_by_buffer_namespace_and_name_across_existing_and_new_nodes() {
    let r = result(
        &[
            "capacity-buffer/default/a/1",
            "capacity-buffer/default/a/2",
            "real",
        ],
        &[
            "capacity-buffer/default/a/3",
            "capacity-buffer/other/a/1",
            "capacity-buffer/other/a/2",
        ],
        &[],
    );
    let summary = placed(&r);
    assert_eq!(
        summary["default/a"],
        Placed {
            existing: 2,
            new: 1,
            ..Placed::default()
        }
    );
    assert_eq!(
        summary["other/a"],
        Placed {
            existing: 0,
            new: 2,
            ..Placed::default()
        }
    );
    assert_eq!(summary.len(), 2, "real pods are ignored");
    assert_eq!(hosts(&r), BTreeSet::from(["node-a".to_owned()]));
}

#[test]
fn should_compute_the_provisioning_condition_as_upstream() {
    let r = resolve(&template_buffer("web", Some(3), &[]));
    let fits = provisioning(
        &r,
        Some(&Placed {
            existing: 3,
            ..Placed::default()
        }),
    )
    .unwrap();
    assert_eq!((fits.status, fits.reason), (true, "FitsExistingCapacity"));
    let new = provisioning(
        &r,
        Some(&Placed {
            existing: 1,
            new: 2,
            ..Placed::default()
        }),
    )
    .unwrap();
    assert_eq!((new.status, new.reason), (false, "RequiresNewCapacity"));
    assert_eq!(new.message, "2/3 virtual pods required new capacity");
    let infeasible = placed(&result(
        &[],
        &[],
        &[(
            "capacity-buffer/default/web/1",
            "incompatible with nodepool \"default\"",
        )],
    ));
    let c = provisioning(&r, infeasible.get("default/web")).unwrap();
    assert_eq!(c.reason, "Infeasible");
    let limited = placed(&result(
        &[],
        &[],
        &[(
            "capacity-buffer/default/web/1",
            "would exceed the NodePool's limits",
        )],
    ));
    let c = provisioning(&r, limited.get("default/web")).unwrap();
    assert_eq!(c.reason, "RequiresNewCapacity");
    // Ready but not seen in the round: left as it is.
    assert_eq!(provisioning(&r, None), None);
}
