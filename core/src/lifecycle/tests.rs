//! Given a NodeClaim in some phase, when an input arrives, then these commands — for every
//! transition of the lifecycle, including those only end-to-end tests used to reach
//! (evictions, grace periods, volume waits, failed cordons, terminations and releases).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_journal::{EntityRef, Envelope, JournalEvent, Projection};

use super::nodeclaim::*;
use crate::api::nodeclaim::condition;
use crate::api::{NodeClaim, NodePool};
use crate::events::{ClusterView, DomainEvent, NodeClaimPlan, NodeClaimState, NodeClaimView};
use crate::model::{CapacityType, Requirements};
use crate::ports::{
    CloudError, ClusterError, EventObject, Instance, InstanceState, InterruptionKind,
    LaunchRequest, OfferingKey,
};

mod disruption;

/// A cluster write that failed, for no reason the lifecycle treats specially.
fn failed_write(message: &str) -> ClusterError {
    ClusterError::Other {
        object: "Node/node-1".into(),
        message: message.into(),
    }
}

const TIMING: Timing = Timing {
    launch_timeout: Duration::from_secs(300),
    registration_timeout: Duration::from_secs(900),
    retry: Duration::from_secs(5),
    drift_check: Duration::from_secs(300),
};
const NOW: i64 = 1_000_000;

fn plan() -> NodeClaimPlan {
    NodeClaimPlan {
        nodeclaim: "default-x7k2p".into(),
        nodepool: "default".into(),
        round: 3,
        pods: vec!["web/web-1".into()],
        requests: Default::default(),
        instance_types: Vec::new(),
        min_values_relaxed: false,
    }
}

fn pool(template_labels: serde_json::Value) -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {"template": {
            "metadata": {"labels": template_labels},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "terminationGracePeriod": "1h"
            }
        }}
    }))
    .unwrap()
}

fn instance() -> Instance {
    Instance {
        id: "i-0abc".into(),
        provider_id: "aws:///us-west-2a/i-0abc".into(),
        nodeclaim: "default-x7k2p".into(),
        nodepool: "default".into(),
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        capacity_type: CapacityType::OnDemand,
        price: 0.096,
        state: InstanceState::Running,
        image_id: "ami-1".into(),
        launched_at_ms: Some(NOW),
        price_source: None,
        reservation: None,
    }
}

/// A new NodeClaim, journaled up to its planning and launch intent.
fn pending() -> Live {
    let plan = plan();
    let planned = crate::scheduling::PlannedNodeClaim {
        nodepool: plan.nodepool.clone(),
        requirements: Requirements::default(),
        instance_types: Vec::new(),
        pods: plan.pods.clone(),
        requests: Default::default(),
        min_values_relaxed: false,
    };
    let object = NodeClaim::planned(&plan.nodeclaim, &pool(serde_json::json!({})), &planned);
    let mut view = NodeClaimView::planned(&plan);
    view.apply(&DomainEvent::LaunchRequested {
        nodeclaim: plan.nodeclaim.clone(),
        client_token: "default-x7k2p-r3".into(),
    });
    Live {
        name: plan.nodeclaim.clone(),
        view,
        object,
        launch: LaunchRequest {
            nodeclaim: plan.nodeclaim.clone(),
            nodepool: plan.nodepool.clone(),
            client_token: "default-x7k2p-r3".into(),
            node_class: "default".into(),
            requirements: Requirements::default(),
            labels: Default::default(),
            taints: Vec::new(),
            instance_types: Vec::new(),
            overlaid: false,
        },
        instance_types: Vec::new(),
        object_exists: true,
        write_retry_pending: false,
        launch_attempts: 0,
        cordoned: false,
        awaiting_volumes: false,
        drain_since_ms: None,
        disruption: None,
        pool_drift: None,
        provider_drift: None,
    }
}

/// Runs the commands as the actor would, for what they change here: records fold into the
/// view, updates into the bookkeeping. Returns them.
fn apply(live: &mut Live, commands: &[Command]) {
    for command in commands {
        match command {
            Command::Record(events) | Command::RecordDurably(events) => {
                for e in events {
                    live.view.apply(e);
                }
            }
            Command::Update(u) => live.update(u, Time(jiff::Timestamp::UNIX_EPOCH)),
            _ => {}
        }
    }
}

/// `live` after `inputs`, each decided and applied in turn.
fn after(mut live: Live, inputs: Vec<Input>) -> Live {
    for input in inputs {
        let commands = decide(&live, input, NOW, &TIMING);
        apply(&mut live, &commands);
    }
    live
}

fn launched() -> Live {
    after(pending(), vec![Input::LaunchResult(Ok(instance()))])
}

fn registered() -> Live {
    after(
        launched(),
        vec![Input::NodeRegistered {
            node: "node-1".into(),
        }],
    )
}

fn initialized() -> Live {
    after(registered(), vec![Input::NodeReady])
}

fn draining() -> Live {
    after(
        initialized(),
        vec![Input::Interrupted {
            kind: InterruptionKind::SpotInterrupted,
        }],
    )
}

fn recorded(commands: &[Command]) -> Vec<DomainEvent> {
    commands
        .iter()
        .flat_map(|c| match c {
            Command::Record(e) | Command::RecordDurably(e) => e.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn emitted(commands: &[Command]) -> Vec<(String, String)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Emit {
                reason, message, ..
            } => Some((reason.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

fn ignored(commands: &[Command]) -> Option<(&'static str, NodeClaimState)> {
    match commands {
        [Command::Ignore { input, phase }] => Some((input, *phase)),
        _ => None,
    }
}

fn terminating(reason: &str) -> DomainEvent {
    DomainEvent::NodeClaimTerminating {
        nodeclaim: "default-x7k2p".into(),
        reason: reason.into(),
    }
}

#[test]
fn a_new_nodeclaim_records_its_launch_intent_durably_then_writes_its_object() {
    let mut live = pending();
    live.object_exists = false;
    let commands = start(&live, &TIMING);
    assert_eq!(
        commands,
        vec![
            Command::Metric(Metric::Created),
            Command::RecordDurably(vec![DomainEvent::LaunchRequested {
                nodeclaim: "default-x7k2p".into(),
                client_token: "default-x7k2p-r3".into(),
            }]),
            Command::Next(Input::WriteDue),
            Command::After(TIMING.launch_timeout, Input::LaunchDeadline),
        ]
    );
}

#[test]
fn the_first_successful_write_starts_the_launch_and_later_ones_do_not() {
    let mut live = pending();
    live.object_exists = false;
    let first = decide(&live, Input::Written(Ok(())), NOW, &TIMING);
    assert_eq!(
        first,
        vec![
            Command::Update(Update::ObjectExists),
            Command::Next(Input::LaunchDue)
        ]
    );
    apply(&mut live, &first);
    let again = decide(&live, Input::Written(Ok(())), NOW, &TIMING);
    assert_eq!(again, vec![Command::Update(Update::ObjectExists)]);
    let launch = decide(&live, Input::LaunchDue, NOW, &TIMING);
    assert_eq!(launch[1], Command::Call(Call::Launch(live.launch.clone())));
}

#[test]
fn a_failed_write_is_retried_once_however_often_it_fails() {
    let live = pending();
    let failure = || {
        Input::Written(Err(WriteFailure {
            gone: false,
            message: "503".into(),
        }))
    };
    let commands = decide(&live, failure(), NOW, &TIMING);
    assert!(commands.contains(&Command::After(TIMING.retry, Input::WriteDue)));
    let live = after(live, vec![failure()]);
    assert!(live.write_retry_pending);
    let commands = decide(&live, failure(), NOW, &TIMING);
    assert!(
        !commands.iter().any(|c| matches!(c, Command::After(..))),
        "{commands:?}"
    );
    // The retry clears the flag before it writes.
    assert_eq!(
        decide(&live, Input::WriteDue, NOW, &TIMING),
        vec![
            Command::Update(Update::WriteRetryPending(false)),
            Command::Call(Call::WriteObject)
        ]
    );
}

#[test]
fn a_nodepool_gone_before_the_first_write_ends_the_claim_without_a_launch() {
    let mut live = pending();
    live.object_exists = false;
    let commands = decide(
        &live,
        Input::Written(Err(WriteFailure {
            gone: true,
            message: "nodepools \"default\" not found".into(),
        })),
        NOW,
        &TIMING,
    );
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::Call(Call::Launch(_)) | Command::Next(_)))
    );
    let events = recorded(&commands);
    assert!(matches!(&events[0], DomainEvent::LaunchFailed { .. }));
    assert_eq!(
        events[1],
        DomainEvent::NodeClaimTerminated {
            nodeclaim: "default-x7k2p".into(),
            reason: "nodepool_deleted".into()
        }
    );
    assert_eq!(commands.last(), Some(&Command::Stop));
}

#[test]
fn a_launch_records_the_instance_tells_the_scheduler_and_arms_the_registration_deadline() {
    let live = pending();
    let commands = decide(&live, Input::LaunchResult(Ok(instance())), NOW, &TIMING);
    assert_eq!(
        recorded(&commands),
        vec![DomainEvent::NodeClaimLaunched {
            nodeclaim: "default-x7k2p".into(),
            instance: Box::new(instance())
        }]
    );
    for expected in [
        Command::SchedulerLaunched(instance()),
        Command::Update(Update::ObjectLaunched(instance())),
        Command::Call(Call::WriteObject),
        Command::PoolCounts,
        Command::After(TIMING.registration_timeout, Input::RegistrationDeadline),
    ] {
        assert!(
            commands.contains(&expected),
            "{expected:?} missing from {commands:?}"
        );
    }
    let live = after(live, vec![Input::LaunchResult(Ok(instance()))]);
    assert_eq!(live.view.state, NodeClaimState::Launched);
    assert_eq!(
        live.object.status.as_ref().unwrap().provider_id.as_deref(),
        Some("aws:///us-west-2a/i-0abc")
    );
}

#[test]
fn insufficient_capacity_marks_the_offerings_and_ends_the_claim_so_its_pods_are_replanned() {
    let offering = OfferingKey {
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        capacity_type: CapacityType::Spot,
    };
    let live = pending();
    let commands = decide(
        &live,
        Input::LaunchResult(Err(CloudError::InsufficientCapacity {
            offerings: vec![offering.clone()],
        })),
        NOW,
        &TIMING,
    );
    assert!(commands.contains(&Command::MarkUnavailable(vec![offering.clone()])));
    assert_eq!(emitted(&commands)[0].0, "InsufficientCapacityError");
    assert_eq!(
        recorded(&commands),
        vec![
            DomainEvent::LaunchFailed {
                nodeclaim: "default-x7k2p".into(),
                reason: "insufficient capacity for 1 offering(s)".into(),
                unavailable: vec![offering],
            },
            terminating("insufficient_capacity"),
        ]
    );
    assert_eq!(commands.last(), Some(&Command::Call(Call::Release)));
    let live = after(
        live,
        vec![Input::LaunchResult(Err(CloudError::InsufficientCapacity {
            offerings: Vec::new(),
        }))],
    );
    let end = decide(&live, Input::Released(Ok(())), NOW, &TIMING);
    assert_eq!(
        recorded(&end),
        vec![DomainEvent::NodeClaimTerminated {
            nodeclaim: "default-x7k2p".into(),
            reason: "insufficient_capacity".into()
        }]
    );
    assert!(end.contains(&Command::SchedulerEnded("insufficient_capacity".into())));
}

#[test]
fn other_launch_failures_back_off_exponentially_up_to_a_minute() {
    let mut live = pending();
    let failure = || Input::LaunchResult(Err(CloudError::Other("throttled".into())));
    let mut waits = Vec::new();
    for _ in 0..8 {
        live = after(live, vec![Input::LaunchDue]);
        let commands = decide(&live, failure(), NOW, &TIMING);
        waits.extend(commands.iter().filter_map(|c| match c {
            Command::After(d, Input::LaunchDue) => Some(d.as_secs()),
            _ => None,
        }));
        assert!(commands.contains(&Command::Metric(Metric::LaunchError("other"))));
    }
    assert_eq!(waits, vec![2, 4, 8, 16, 32, 64, 64, 64]);
    let not_ready = decide(
        &live,
        Input::LaunchResult(Err(CloudError::NodeClassNotReady {
            name: "default".into(),
            reason: "no subnets".into(),
        })),
        NOW,
        &TIMING,
    );
    assert_eq!(
        emitted(&not_ready),
        vec![(
            "NodeClassNotReady".into(),
            "EC2NodeClass default is not ready: no subnets".into()
        )]
    );
}

#[test]
fn the_launch_deadline_ends_a_pending_claim_and_means_nothing_once_launched() {
    let commands = decide(&pending(), Input::LaunchDeadline, NOW, &TIMING);
    assert!(commands.contains(&Command::PoolRegistration(Some("launch_timeout".into()))));
    assert_eq!(recorded(&commands)[1], terminating("launch_timeout"));
    assert_eq!(commands.last(), Some(&Command::Call(Call::Release)));
    assert_eq!(
        ignored(&decide(&launched(), Input::LaunchDeadline, NOW, &TIMING)),
        Some(("LaunchDeadline", NodeClaimState::Launched))
    );
}

#[test]
fn registration_records_the_node_syncs_it_and_tells_the_pool() {
    let live = launched();
    let commands = decide(
        &live,
        Input::NodeRegistered {
            node: "node-1".into(),
        },
        NOW,
        &TIMING,
    );
    assert_eq!(
        recorded(&commands),
        vec![DomainEvent::NodeClaimRegistered {
            nodeclaim: "default-x7k2p".into(),
            node: "node-1".into()
        }]
    );
    for expected in [
        Command::Update(Update::ObjectNode("node-1".into())),
        Command::Call(Call::SyncNode("node-1".into())),
        Command::Call(Call::WriteObject),
        Command::Metric(Metric::NodeCreated),
        Command::PoolRegistration(None),
    ] {
        assert!(commands.contains(&expected), "{expected:?} missing");
    }
    let live = registered();
    assert_eq!(live.view.node.as_deref(), Some("node-1"));
    assert!(live.object.condition_is_true(condition::REGISTERED));
    assert_eq!(
        ignored(&decide(
            &pending(),
            Input::NodeRegistered { node: "n".into() },
            NOW,
            &TIMING
        )),
        Some(("NodeRegistered", NodeClaimState::Pending))
    );
}

#[test]
fn a_ready_node_initializes_a_registered_claim_only() {
    let live = initialized();
    assert_eq!(live.view.state, NodeClaimState::Initialized);
    assert!(live.object.condition_is_true(condition::INITIALIZED));
    assert_eq!(
        ignored(&decide(&launched(), Input::NodeReady, NOW, &TIMING)),
        Some(("NodeReady", NodeClaimState::Launched))
    );
}

#[test]
fn a_node_that_never_registers_gets_its_instance_terminated() {
    let commands = decide(&launched(), Input::RegistrationDeadline, NOW, &TIMING);
    assert!(commands.contains(&Command::PoolRegistration(Some(
        "registration_timeout".into()
    ))));
    assert_eq!(
        recorded(&commands),
        vec![terminating("registration_timeout")]
    );
    assert_eq!(
        commands.last(),
        Some(&Command::Call(Call::DeleteInstance("i-0abc".into())))
    );
    assert!(
        !commands.contains(&Command::Call(Call::Release)),
        "released before the instance is gone"
    );
    assert_eq!(
        ignored(&decide(
            &registered(),
            Input::RegistrationDeadline,
            NOW,
            &TIMING
        )),
        Some(("RegistrationDeadline", NodeClaimState::Registered))
    );
}

#[test]
fn a_rebalance_recommendation_is_recorded_and_reported_but_drains_nothing() {
    let commands = decide(
        &initialized(),
        Input::Interrupted {
            kind: InterruptionKind::RebalanceRecommendation,
        },
        NOW,
        &TIMING,
    );
    assert_eq!(recorded(&commands).len(), 1);
    assert_eq!(emitted(&commands)[0].0, "SpotRebalanceRecommendation");
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::Next(Input::DrainDue)))
    );
}

#[test]
fn a_spot_interruption_reports_on_the_node_and_starts_draining() {
    let commands = decide(
        &initialized(),
        Input::Interrupted {
            kind: InterruptionKind::SpotInterrupted,
        },
        NOW,
        &TIMING,
    );
    assert!(
        matches!(&commands[0], Command::Emit { object: EventObject::Node(n), reason, .. } if n == "node-1" && reason == "SpotInterrupted")
    );
    let events = recorded(&commands);
    assert!(matches!(
        events[0],
        DomainEvent::InterruptionReceived { .. }
    ));
    assert_eq!(
        events[1],
        DomainEvent::NodeClaimDraining {
            nodeclaim: "default-x7k2p".into(),
            reason: "spot_interrupted".into()
        }
    );
    assert!(commands.contains(&Command::Update(Update::DrainSince(NOW))));
    assert_eq!(commands.last(), Some(&Command::Next(Input::DrainDue)));
    let live = draining();
    assert_eq!(live.view.state, NodeClaimState::Draining);
    assert_eq!(live.view.reason.as_deref(), Some("spot_interrupted"));
    // Not launched: nothing to interrupt. Draining: already on its way out.
    assert!(
        ignored(&decide(
            &pending(),
            Input::Interrupted {
                kind: InterruptionKind::SpotInterrupted
            },
            NOW,
            &TIMING
        ))
        .is_some()
    );
    assert!(
        ignored(&decide(
            &live,
            Input::Interrupted {
                kind: InterruptionKind::SpotInterrupted
            },
            NOW,
            &TIMING
        ))
        .is_some()
    );
}

#[test]
fn a_deleted_claim_is_released_if_it_never_launched_and_drained_if_it_did() {
    let commands = decide(&pending(), Input::Deleted { since_ms: None }, NOW, &TIMING);
    assert_eq!(recorded(&commands), vec![terminating("deleted")]);
    assert_eq!(commands.last(), Some(&Command::Call(Call::Release)));
    // The grace period counts from the deletion, also when the drain starts later.
    let commands = decide(
        &initialized(),
        Input::Deleted {
            since_ms: Some(NOW - 60_000),
        },
        NOW,
        &TIMING,
    );
    assert!(commands.contains(&Command::Update(Update::DrainSince(NOW - 60_000))));
    assert!(
        matches!(&recorded(&commands)[0], DomainEvent::NodeClaimDraining { reason, .. } if reason == "deleted")
    );
}

#[test]
fn a_drain_cordons_first_and_retries_a_failed_cordon_before_evicting_anything() {
    let live = draining();
    assert_eq!(
        decide(&live, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::Cordon("node-1".into()))]
    );
    let failed = decide(
        &live,
        Input::Cordoned(Err(failed_write("conflict"))),
        NOW,
        &TIMING,
    );
    assert_eq!(emitted(&failed)[0].0, "FailedDraining");
    assert_eq!(
        failed.last(),
        Some(&Command::After(TIMING.retry, Input::DrainDue))
    );
    assert!(
        !failed
            .iter()
            .any(|c| matches!(c, Command::Call(Call::DrainPass { .. })))
    );
    let ok = decide(&live, Input::Cordoned(Ok(())), NOW, &TIMING);
    assert_eq!(
        ok,
        vec![
            Command::Update(Update::Cordoned),
            Command::Call(Call::DrainPass {
                node: "node-1".into(),
                expired: false
            })
        ]
    );
    let cordoned = after(live, vec![Input::Cordoned(Ok(()))]);
    assert_eq!(
        decide(&cordoned, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::DrainPass {
            node: "node-1".into(),
            expired: false
        })]
    );
}

#[test]
fn a_drain_waits_for_pods_then_for_volumes_then_terminates() {
    let live = after(draining(), vec![Input::Cordoned(Ok(()))]);
    let pods_left = decide(
        &live,
        Input::DrainPassed(DrainReport {
            pods_gone: false,
            attached_volumes: 0,
        }),
        NOW,
        &TIMING,
    );
    assert_eq!(
        pods_left,
        vec![Command::After(TIMING.retry, Input::DrainDue)]
    );
    let volumes = DrainReport {
        pods_gone: true,
        attached_volumes: 2,
    };
    let first = decide(&live, Input::DrainPassed(volumes), NOW, &TIMING);
    assert_eq!(
        emitted(&first),
        vec![(
            "AwaitingVolumeDetachment".into(),
            "Awaiting deletion of 2 VolumeAttachment(s) bound to node node-1".into()
        )]
    );
    let waiting = after(live.clone(), vec![Input::DrainPassed(volumes)]);
    assert!(
        emitted(&decide(&waiting, Input::DrainPassed(volumes), NOW, &TIMING)).is_empty(),
        "reported once"
    );
    let done = decide(
        &live,
        Input::DrainPassed(DrainReport {
            pods_gone: true,
            attached_volumes: 0,
        }),
        NOW,
        &TIMING,
    );
    assert!(done.iter().any(|c| matches!(c, Command::Update(Update::SetCondition { type_, status: true, .. }) if *type_ == condition::DRAINED)));
    assert_eq!(recorded(&done), vec![terminating("spot_interrupted")]);
    assert_eq!(
        done.last(),
        Some(&Command::Call(Call::DeleteInstance("i-0abc".into())))
    );
}

#[test]
fn once_the_grace_period_has_passed_nothing_waits_for_a_cordon_or_for_pods() {
    let mut live = draining();
    live.drain_since_ms = Some(NOW - 3_600_000);
    assert_eq!(
        decide(&live, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::DrainPass {
            node: "node-1".into(),
            expired: true
        })]
    );
    live.drain_since_ms = Some(NOW - 3_599_000);
    assert_eq!(
        decide(&live, Input::DrainDue, NOW, &TIMING),
        vec![Command::Call(Call::Cordon("node-1".into()))]
    );
}

#[test]
fn the_instance_is_terminated_before_the_node_and_object_go_and_failures_are_retried() {
    let live = after(launched(), vec![Input::RegistrationDeadline]);
    assert_eq!(live.view.state, NodeClaimState::Terminating);
    let failed = decide(
        &live,
        Input::InstanceDeleted(Err(CloudError::Other("throttled".into()))),
        NOW,
        &TIMING,
    );
    assert_eq!(
        failed.last(),
        Some(&Command::After(TIMING.retry, Input::DrainDue))
    );
    assert!(!failed.contains(&Command::Call(Call::Release)));
    // The retry terminates again (no second Terminating record) and only then releases.
    let retry = decide(&live, Input::DrainDue, NOW, &TIMING);
    assert_eq!(
        retry,
        vec![Command::Call(Call::DeleteInstance("i-0abc".into()))]
    );
    let registered = after(
        registered(),
        vec![Input::NodeGone {
            reason: "node node-1 was deleted".into(),
        }],
    );
    // The Node goes before the object, and the object only once the Node is gone.
    assert_eq!(
        decide(&registered, Input::InstanceDeleted(Ok(())), NOW, &TIMING),
        vec![Command::Call(Call::DeleteNode("node-1".into()))]
    );
    let failed = decide(
        &registered,
        Input::NodeDeleted(Err(failed_write("etcd timeout"))),
        NOW,
        &TIMING,
    );
    assert!(!failed.contains(&Command::Call(Call::Release)));
    assert_eq!(
        failed.last(),
        Some(&Command::After(TIMING.retry, Input::DrainDue))
    );
    assert_eq!(
        decide(&registered, Input::NodeDeleted(Ok(())), NOW, &TIMING),
        vec![Command::Call(Call::Release)]
    );
    // Without a node, the object goes as soon as the instance is gone.
    assert_eq!(
        decide(&live, Input::InstanceDeleted(Ok(())), NOW, &TIMING),
        vec![Command::Call(Call::Release)]
    );
}

#[test]
fn a_failed_node_sync_is_retried_while_the_node_is_registered() {
    let live = registered();
    let failed = decide(
        &live,
        Input::NodeSynced(Err(failed_write("503"))),
        NOW,
        &TIMING,
    );
    assert_eq!(
        failed.last(),
        Some(&Command::After(TIMING.retry, Input::SyncDue))
    );
    assert_eq!(
        decide(&live, Input::SyncDue, NOW, &TIMING),
        vec![Command::Call(Call::SyncNode("node-1".into()))]
    );
    assert!(decide(&initialized(), Input::NodeSynced(Ok(())), NOW, &TIMING).is_empty());
    // Once draining, a late failure or retry means nothing.
    assert_eq!(
        ignored(&decide(&draining(), Input::SyncDue, NOW, &TIMING)),
        Some(("SyncDue", NodeClaimState::Draining))
    );
    assert_eq!(
        ignored(&decide(
            &draining(),
            Input::NodeSynced(Err(failed_write("503"))),
            NOW,
            &TIMING
        )),
        Some(("NodeSynced", NodeClaimState::Draining))
    );
}

#[test]
fn a_failed_release_is_retried_and_the_end_carries_the_journaled_reason() {
    let live = after(
        registered(),
        vec![
            Input::NodeGone {
                reason: "node node-1 was deleted".into(),
            },
            Input::InstanceDeleted(Ok(())),
        ],
    );
    let failed = decide(
        &live,
        Input::Released(Err(failed_write("503"))),
        NOW,
        &TIMING,
    );
    assert_eq!(
        failed.last(),
        Some(&Command::After(TIMING.retry, Input::DrainDue))
    );
    let end = decide(&live, Input::Released(Ok(())), NOW, &TIMING);
    assert_eq!(
        recorded(&end),
        vec![DomainEvent::NodeClaimTerminated {
            nodeclaim: "default-x7k2p".into(),
            reason: "node node-1 was deleted".into()
        }]
    );
    assert!(end.contains(&Command::Metric(Metric::Terminated(
        "node node-1 was deleted".into()
    ))));
    assert!(end.contains(&Command::PoolCounts));
    assert_eq!(end.last(), Some(&Command::Stop));
    let ended = after(live, vec![Input::Released(Ok(()))]);
    assert_eq!(ended.view.state, NodeClaimState::Terminated);
    assert!(
        ignored(&decide(
            &ended,
            Input::NodeGone { reason: "x".into() },
            NOW,
            &TIMING
        ))
        .is_some()
    );
    assert!(ignored(&decide(&ended, Input::Released(Ok(())), NOW, &TIMING)).is_some());
}

#[test]
fn a_node_gone_while_draining_terminates_at_once_with_its_own_reason() {
    let commands = decide(
        &draining(),
        Input::NodeGone {
            reason: "instance reclaimed".into(),
        },
        NOW,
        &TIMING,
    );
    assert_eq!(recorded(&commands), vec![terminating("instance reclaimed")]);
    assert_eq!(
        commands.last(),
        Some(&Command::Call(Call::DeleteInstance("i-0abc".into())))
    );
}

#[test]
fn every_input_outside_its_phase_is_ignored_with_the_phase() {
    let live = draining();
    for (input, name) in [
        (Input::LaunchDue, "LaunchDue"),
        (Input::LaunchResult(Ok(instance())), "LaunchResult"),
        (Input::NodeReady, "NodeReady"),
        (Input::Deleted { since_ms: None }, "Deleted"),
        (
            Input::NodePoolChanged(Box::new(pool(serde_json::json!({})))),
            "NodePoolChanged",
        ),
        (Input::InstanceDeleted(Ok(())), "InstanceDeleted"),
        (
            Input::Disrupt {
                reason: "empty".into(),
            },
            "Disrupt",
        ),
        (
            Input::MarkDisrupted {
                reason: Some("Empty".into()),
            },
            "MarkDisrupted",
        ),
        (Input::Consolidatable(true), "Consolidatable"),
        (Input::ProviderDrift(None), "ProviderDrift"),
        (Input::NodeClassChanged, "NodeClassChanged"),
    ] {
        assert_eq!(
            ignored(&decide(&live, input, NOW, &TIMING)),
            Some((name, NodeClaimState::Draining))
        );
    }
    assert_eq!(
        ignored(&decide(&initialized(), Input::DrainDue, NOW, &TIMING)),
        Some(("DrainDue", NodeClaimState::Initialized))
    );
}

#[test]
fn a_whole_life_replays_to_the_view_the_actor_held() {
    let mut live = pending();
    let mut journal = vec![
        DomainEvent::NodeClaimPlanned(Box::new(plan())),
        DomainEvent::LaunchRequested {
            nodeclaim: "default-x7k2p".into(),
            client_token: "default-x7k2p-r3".into(),
        },
    ];
    for input in [
        Input::LaunchResult(Ok(instance())),
        Input::NodeRegistered {
            node: "node-1".into(),
        },
        Input::NodeReady,
        Input::Deleted {
            since_ms: Some(NOW),
        },
        Input::DrainDue,
        Input::Cordoned(Ok(())),
        Input::DrainPassed(DrainReport {
            pods_gone: true,
            attached_volumes: 0,
        }),
        Input::InstanceDeleted(Ok(())),
        Input::Released(Ok(())),
    ] {
        let commands = decide(&live, input, NOW, &TIMING);
        journal.extend(recorded(&commands));
        apply(&mut live, &commands);
    }
    let states: Vec<&str> = journal.iter().map(DomainEvent::event_type).collect();
    assert_eq!(
        states,
        vec![
            "NodeClaimPlanned",
            "LaunchRequested",
            "NodeClaimLaunched",
            "NodeClaimRegistered",
            "NodeClaimInitialized",
            "NodeClaimDraining",
            "NodeClaimTerminating",
            "NodeClaimTerminated",
        ]
    );
    let mut view = ClusterView::default();
    for (seq, event) in journal.into_iter().enumerate() {
        view.apply(&Envelope {
            seq: seq as u64 + 1,
            recorded_at_ms: NOW,
            entity: EntityRef::new("NodeClaim", "default-x7k2p"),
            event_type: event.event_type().to_owned(),
            schema_version: DomainEvent::SCHEMA_VERSION,
            event,
        });
    }
    assert_eq!(view.nodeclaims["default-x7k2p"], live.view);
    assert_eq!(live.view.ended.as_deref(), Some("deleted"));
}
