//! Drift, the disruption mark and the Consolidatable condition.

use super::*;
use crate::ports::NodeClassHash;
use crate::vocab::labels;

#[test]
fn drift_is_set_once_cleared_when_gone_and_written_only_once_the_object_exists() {
    let live = initialized();
    let changed = pool(serde_json::json!({"team": "b"}));
    let commands = decide(
        &live,
        Input::NodePoolChanged(Box::new(changed.clone())),
        NOW,
        &TIMING,
    );
    assert!(commands.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, status: true, .. }) if *type_ == condition::DRIFTED)));
    assert_eq!(commands.last(), Some(&Command::Call(Call::WriteObject)));
    let drifted = after(
        live,
        vec![Input::NodePoolChanged(Box::new(changed.clone()))],
    );
    assert!(
        decide(
            &drifted,
            Input::NodePoolChanged(Box::new(changed)),
            NOW,
            &TIMING
        )
        .is_empty()
    );
    let back = decide(
        &drifted,
        Input::NodePoolChanged(Box::new(pool(serde_json::json!({})))),
        NOW,
        &TIMING,
    );
    assert_eq!(
        back,
        vec![
            Command::Update(Update::PoolDrift(None)),
            Command::Update(Update::RemoveCondition(condition::DRIFTED)),
            Command::Call(Call::WriteObject)
        ]
    );
    let mut unwritten = pending();
    unwritten.object_exists = false;
    let commands = decide(
        &unwritten,
        Input::NodePoolChanged(Box::new(pool(serde_json::json!({"team": "b"})))),
        NOW,
        &TIMING,
    );
    assert!(!commands.contains(&Command::Call(Call::WriteObject)));
}

#[test]
fn the_cloud_s_drift_shows_unless_the_pool_s_does_and_clears_when_gone() {
    let live = initialized();
    let ami = Some(("AMIDrift".to_owned(), "image ami-1 is old".to_owned()));
    let commands = decide(&live, Input::ProviderDrift(ami.clone()), NOW, &TIMING);
    assert!(commands.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, reason, .. }) if *type_ == condition::DRIFTED && reason == "AMIDrift")));
    let drifted = after(live, vec![Input::ProviderDrift(ami.clone())]);
    assert_eq!(drifted.provider_drift, ami);
    // The pool's drift wins while both hold.
    let both = after(
        drifted.clone(),
        vec![Input::NodePoolChanged(Box::new(pool(
            serde_json::json!({"team": "b"}),
        )))],
    );
    let reason = |l: &Live| {
        l.object
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::DRIFTED))
            .map(|c| c.reason.clone())
    };
    assert_eq!(reason(&both).as_deref(), Some("NodePoolDrifted"));
    // Gone from the cloud's side: the condition goes.
    let cleared = after(drifted, vec![Input::ProviderDrift(None)]);
    assert_eq!(reason(&cleared), None);
    // The check runs on its clock while the claim runs, and not once it drains.
    let commands = decide(&initialized(), Input::DriftDue, NOW, &TIMING);
    assert_eq!(
        commands,
        vec![
            Command::Call(Call::CheckDrift),
            Command::After(TIMING.drift_check, Input::DriftDue)
        ]
    );
    assert!(ignored(&decide(&draining(), Input::DriftDue, NOW, &TIMING)).is_some());
}

#[test]
fn a_command_marks_its_candidate_then_disrupts_it_and_a_mark_can_be_taken_back() {
    let live = initialized();
    let commands = decide(
        &live,
        Input::MarkDisrupted {
            reason: Some("Drifted".into()),
        },
        NOW,
        &TIMING,
    );
    assert!(commands.contains(&Command::Call(Call::MarkNode {
        node: "node-1".into(),
        disrupted: true
    })));
    assert!(commands.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, reason, .. }) if *type_ == condition::DISRUPTION_REASON && reason == "Drifted")));
    let marked = after(
        live,
        vec![Input::MarkDisrupted {
            reason: Some("Drifted".into()),
        }],
    );
    assert_eq!(marked.disruption.as_deref(), Some("Drifted"));
    // A failed taint is tried again with the mark it has.
    let retried = decide(
        &marked,
        Input::Marked(Err(super::failed_write("conflict"))),
        NOW,
        &TIMING,
    );
    assert!(retried.contains(&Command::After(
        TIMING.retry,
        Input::MarkDisrupted {
            reason: Some("Drifted".into())
        }
    )));
    let unmarked = decide(&marked, Input::MarkDisrupted { reason: None }, NOW, &TIMING);
    assert!(unmarked.contains(&Command::Update(Update::RemoveCondition(
        condition::DISRUPTION_REASON
    ))));
    assert!(unmarked.contains(&Command::Call(Call::MarkNode {
        node: "node-1".into(),
        disrupted: false
    })));
    // Disrupted: counted, and drained with its reason, its grace period from now.
    let commands = decide(
        &marked,
        Input::Disrupt {
            reason: "drifted".into(),
        },
        NOW,
        &TIMING,
    );
    assert!(commands.contains(&Command::Metric(Metric::Disrupted("drifted".into()))));
    assert!(commands.contains(&Command::Update(Update::DrainSince(NOW))));
    assert!(
        matches!(&recorded(&commands)[0], DomainEvent::NodeClaimDraining { reason, .. } if reason == "drifted")
    );
    // Never launched: let go at once.
    let commands = decide(
        &pending(),
        Input::Disrupt {
            reason: "expired".into(),
        },
        NOW,
        &TIMING,
    );
    assert!(commands.contains(&Command::Call(Call::Release)));
}

#[test]
fn the_consolidatable_condition_is_written_only_when_it_changes() {
    let live = initialized();
    let set = decide(&live, Input::Consolidatable(true), NOW, &TIMING);
    assert!(set.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, status: true, .. }) if *type_ == condition::CONSOLIDATABLE)));
    assert_eq!(set.last(), Some(&Command::Call(Call::WriteObject)));
    let consolidatable = after(live, vec![Input::Consolidatable(true)]);
    assert!(decide(&consolidatable, Input::Consolidatable(true), NOW, &TIMING).is_empty());
    assert_eq!(
        decide(&consolidatable, Input::Consolidatable(false), NOW, &TIMING),
        vec![
            Command::Update(Update::RemoveCondition(condition::CONSOLIDATABLE)),
            Command::Call(Call::WriteObject)
        ]
    );
    assert!(decide(&initialized(), Input::Consolidatable(false), NOW, &TIMING).is_empty());
}

#[test]
fn a_nodeclaim_adopted_while_draining_drains_on_from_its_cordon() {
    let adopt = |state| crate::recovery::Adopt {
        nodeclaim: "c".into(),
        nodepool: "default".into(),
        instance: instance(),
        state,
        node: Some("node-c".into()),
        object: None,
    };
    let resumed = adopted(&adopt(NodeClaimState::Draining), &TIMING, NOW);
    assert!(resumed.contains(&Command::Update(Update::DrainSince(NOW))));
    assert_eq!(resumed.last(), Some(&Command::Next(Input::DrainDue)));
    // Not drift-checked again: it is on its way out.
    assert!(!resumed.contains(&Command::After(TIMING.retry, Input::DriftDue)));
    // The drain pass that follows cordons first (a restarted actor has not cordoned).
    let mut live = draining();
    apply(&mut live, &resumed);
    assert!(!live.cordoned);
    assert_eq!(live.drain_since_ms, Some(NOW));
    assert_eq!(
        decide(&live, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::Cordon("node-1".into()))]
    );
    // One still serving drains nothing.
    let serving = adopted(&adopt(NodeClaimState::Initialized), &TIMING, NOW);
    assert!(!serving.contains(&Command::Next(Input::DrainDue)));
    assert!(serving.contains(&Command::After(TIMING.retry, Input::DriftDue)));
}

/// A NodeClaim another controller created (upstream's hash version `v3`) is stamped with its
/// pool's template as it is now when first shown it: the switch of controllers drifts
/// nothing, and a later template change does.
#[test]
fn a_nodeclaim_taken_over_is_stamped_not_drifted_and_drifts_on_later_changes() {
    let mut live = initialized();
    let annotations = live
        .object
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(labels::NODEPOOL_HASH.into(), "4012513481623584108".into());
    annotations.insert(labels::NODEPOOL_HASH_VERSION.into(), "v3".into());
    let same = pool(serde_json::json!({}));
    let commands = decide(
        &live,
        Input::NodePoolChanged(Box::new(same.clone())),
        NOW,
        &TIMING,
    );
    let hash = crate::api::nodeclaim::nodepool_hash(&same.spec.template);
    assert!(
        commands.contains(&Command::Update(Update::PoolHash(hash.clone()))),
        "{commands:#?}"
    );
    assert_eq!(commands.last(), Some(&Command::Call(Call::WriteObject)));
    assert!(
        !commands.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, .. }) if *type_ == condition::DRIFTED)),
        "{commands:#?}"
    );
    let stamped = after(live, vec![Input::NodePoolChanged(Box::new(same.clone()))]);
    let annotations = stamped
        .object
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert_eq!(annotations[labels::NODEPOOL_HASH], hash);
    assert_eq!(
        annotations[labels::NODEPOOL_HASH_VERSION],
        crate::api::nodeclaim::NODEPOOL_HASH_VERSION
    );
    // Shown again, nothing to do; changed, it drifts.
    assert!(
        decide(
            &stamped,
            Input::NodePoolChanged(Box::new(same)),
            NOW,
            &TIMING
        )
        .is_empty()
    );
    let changed = after(
        stamped,
        vec![Input::NodePoolChanged(Box::new(pool(
            serde_json::json!({"team": "b"}),
        )))],
    );
    assert_eq!(
        changed.pool_drift.as_ref().map(|d| d.0.as_str()),
        Some("NodePoolDrifted")
    );
}

/// The node class hash likewise: another version is stamped over, ours is left alone.
#[test]
fn a_node_class_hash_of_another_version_is_stamped_over() {
    let mut live = initialized();
    // Upstream's version, as ../shared/reference names it.
    NodeClassHash {
        hash: "123".into(),
        version: "v6".into(),
    }
    .stamp(&mut live.object);
    let ours = NodeClassHash {
        hash: "abc".into(),
        version: crate::api::ec2nodeclass::EC2NODECLASS_HASH_VERSION.into(),
    };
    let commands = decide(&live, Input::NodeClassHash(ours.clone()), NOW, &TIMING);
    assert_eq!(commands.len(), 3, "{commands:#?}");
    assert_eq!(
        commands[1],
        Command::Update(Update::ClassHash(ours.clone()))
    );
    assert_eq!(commands[2], Command::Call(Call::WriteObject));
    let stamped = after(live, vec![Input::NodeClassHash(ours.clone())]);
    assert_eq!(
        NodeClassHash::stamped_on(&stamped.object),
        Some(ours.clone())
    );
    let newer = NodeClassHash {
        hash: "def".into(),
        ..ours
    };
    // Same version: compared by the drift check, not stamped over.
    assert!(decide(&stamped, Input::NodeClassHash(newer), NOW, &TIMING).is_empty());
}

/// Upstream's node repair: "should set termination grace period to now when not defined",
/// "should respect termination grace period if set on the nodepool" (the annotation is now
/// either way) and "should not respect do-not-disrupt on node": a NodeClaim disrupted as
/// unhealthy drains with its grace period over from the start, so its first drain pass
/// deletes every pod without a cordon first or a PDB to wait for.
#[test]
fn a_forceful_disruption_drains_with_its_grace_period_over() {
    let live = after(
        initialized(),
        vec![Input::Disrupt {
            reason: crate::lifecycle::nodeclaim::disruption::FORCEFUL_REASON.into(),
        }],
    );
    let pass = decide(&live, Input::DrainDue, NOW, &TIMING);
    assert_eq!(
        pass,
        vec![Command::Call(Call::DrainPass {
            node: "node-1".into(),
            expired: true
        })]
    );
    // Any other reason waits for the cordon and, without a grace period, for PDBs.
    let graceful = after(
        initialized(),
        vec![Input::Disrupt {
            reason: "drifted".into(),
        }],
    );
    assert_eq!(
        decide(&graceful, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::Cordon("node-1".into()))]
    );
}
