//! CapacityBuffers on whole simulated runs: headroom kept ahead of a scaling workload.

use super::*;

/// The buffer scenario: 4 × 2-CPU chunks of headroom ahead of a web tier scaled 4 → 10 →
/// 18 → 26.
const BUFFER: &str = include_str!("../../deploy/scenarios/buffer.yaml");

/// Upstream's CapacityBuffer provisioning end to end (gate CapacityBuffer): the buffer's
/// virtual pods make rounds launch nodes ahead of demand, so each scale-up binds at once on
/// the headroom while the next is launched; Emptiness never takes the headroom's nodes;
/// the buffer's status says it fits existing capacity at the end; every round is reproduced.
#[test]
fn a_capacity_buffer_keeps_headroom_through_a_scale_up() {
    let scenario = parse(BUFFER, "buffer").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gated = options(dir.path(), "e2e-buffer");
    gated.settings.capacity_buffer = true;
    let with = run(&scenario, &gated).unwrap();
    let other = tempfile::tempdir().unwrap();
    let without = run(&scenario, &options(other.path(), "e2e-buffer-off")).unwrap();
    for report in [&with, &without] {
        assert_eq!(
            (report.pods_bound, report.pods_pending),
            (26, 0),
            "{report:#?}"
        );
    }
    // 22 of the 26 pods come in scale-ups: with headroom they bind at once, without it
    // they wait for nodes to launch and join.
    assert!(with.pending_p50 <= 5.0, "{with:#?}");
    assert!(without.pending_p50 >= 30.0, "{without:#?}");
    // The headroom is still there at the end: 8 CPUs beyond what the pods request.
    assert_eq!(with.buffers.len(), 1, "{:?}", with.buffers);
    let buffer = &with.buffers[0];
    assert_eq!(buffer.buffer, "default/web-headroom");
    assert_eq!(buffer.replicas, Some(4));
    assert_eq!(buffer.ready.1, "Resolved");
    let provisioning = buffer.provisioning.as_ref().unwrap();
    assert_eq!(
        (provisioning.0, provisioning.1.as_str()),
        (true, "FitsExistingCapacity"),
        "{provisioning:?}"
    );
    assert!(with.cost_per_hour > without.cost_per_hour);
    assert!(
        !with.disruptions.by_reason.contains_key("empty"),
        "{:?}",
        with.disruptions
    );
    assert!(without.buffers.is_empty());
    let verified = offerings::karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");
    // Explain names the buffer a NodeClaim was launched for.
    let replay = offerings::karpenter(&["journal", "replay", dir.path().to_str().unwrap()]);
    let claims: Vec<&str> = replay
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("default-") && w.len() == "default-xxxxx".len())
        .collect();
    let explained = claims.iter().any(|claim| {
        let journal = dir.path().to_str().unwrap();
        offerings::karpenter(&[
            "journal",
            "explain",
            &format!("nodeclaim/{claim}"),
            "--journal",
            journal,
        ])
        .contains("headroom launched ahead of demand for CapacityBuffer default/web-headroom")
    });
    assert!(explained, "{claims:?}");
}

/// A buffer naming a PodTemplate the scenario does not define is refused before the run,
/// naming the field and the fix.
#[test]
fn a_buffer_referencing_a_missing_template_is_an_error_naming_the_field() {
    let text = BUFFER.replace(
        "podTemplateRef: {name: web-chunk}",
        "podTemplateRef: {name: web-chunks}",
    );
    assert_ne!(text, BUFFER);
    let error = format!("{:#}", parse(&text, "buffer").unwrap_err());
    assert!(
        error.contains("CapacityBuffer/default/web-headroom: spec.podTemplateRef.name: no PodTemplate \"web-chunks\" in podTemplates; define it there or name one that exists (there are web-chunk)"),
        "{error}"
    );
    let text = BUFFER.replace("    replicas: 4\npodTemplates", "podTemplates");
    assert_ne!(text, BUFFER);
    let error = format!("{:#}", parse(&text, "buffer").unwrap_err());
    assert!(
        error.contains("If podTemplateRef is set, replicas or limits must also be set"),
        "{error}"
    );
}
