//! CapacityBuffers on a running controller (gate CapacityBuffer): headroom launched ahead of
//! demand for a buffer of a PodTemplate, and a buffer naming a missing template reported
//! on its status.

use k8s_openapi::api::core::v1::PodTemplate;
use karpenter_core::api::CapacityBuffer;

use super::*;

fn buffer_condition(buffer: &CapacityBuffer, type_: &str) -> Option<(String, String, String)> {
    let c = (buffer.status.as_ref()?.conditions.iter()).find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Upstream's "should resolve a PodTemplate and set ReadyForProvisioning=True" and "should
/// set ReadyForProvisioning=False when PodTemplate is not found", with the provisioner's
/// virtual pods: the buffer's two chunks get a node of their own before any pod needs it,
/// and its status says they fit existing capacity once it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_buffer_launches_headroom_and_reports_its_status() {
    let mut h = Harness::start_without_controller().await;
    let templates: Api<PodTemplate> = Api::namespaced(h.client.clone(), "default");
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web-chunk"},
                "template": {"spec": {
                    "containers": [{"name": "app", "image": "pause",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]
                }}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let buffers: Api<CapacityBuffer> = Api::namespaced(h.client.clone(), "default");
    for (name, template) in [("headroom", "web-chunk"), ("typo", "web-chunks")] {
        buffers
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "autoscaling.x-k8s.io/v1beta1",
                    "kind": "CapacityBuffer",
                    "metadata": {"name": name},
                    "spec": {"podTemplateRef": {"name": template}, "replicas": 2}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    h.run_with("kube-e2e-buffer", |o| o.settings.capacity_buffer = true);
    // No pod is pending: the nodes are the buffer's headroom.
    let (_claim, _node) = ready_node(&h).await;
    eventually("the buffer's status to say its chunks fit", 60, || async {
        let b = buffers.get("headroom").await.ok()?;
        let status = b.status.clone()?;
        (status.replicas == Some(2)
            && status.pod_template_ref.as_ref()?.name == "web-chunk"
            && status.provisioning_strategy.as_deref() == Some("buffer.x-k8s.io/active-capacity")
            && buffer_condition(&b, "ReadyForProvisioning")?.1 == "Resolved"
            && buffer_condition(&b, "Provisioning")?.1 == "FitsExistingCapacity")
            .then_some(())
    })
    .await;
    let typo = eventually(
        "the typo'd buffer to say its template is missing",
        30,
        || async { buffer_condition(&buffers.get("typo").await.ok()?, "ReadyForProvisioning") },
    )
    .await;
    assert_eq!(typo.0, "False");
    assert_eq!(typo.1, "PodTemplateNotFound");
    assert!(
        typo.2.starts_with("spec.podTemplateRef.name: PodTemplate \"web-chunks\" not found in namespace \"default\""),
        "{typo:?}"
    );
    // Later rounds see the chunks fit on the headroom launched and launch no more.
    let count = || async {
        h.nodeclaims()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len()
    };
    let launched = count().await;
    assert!(launched >= 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count().await, launched);
    h.stop().await;
}
