#![allow(clippy::unwrap_used)]

use super::*;
use crate::model::CapacityType;
use crate::ports::InstanceState;
use crate::provisioning::nominations::NominationOutcome;

fn pod(uid: &str, owner: Option<&str>) -> Pod {
    let mut pod = Pod::simple(uid, 100, 1 << 20);
    pod.owner = owner.map(str::to_owned);
    pod
}

fn plan(nodeclaim: &str, pods: &[&str]) -> NodeClaimPlan {
    NodeClaimPlan {
        nodeclaim: nodeclaim.into(),
        nodepool: "default".into(),
        round: 1,
        pods: pods.iter().map(|p| (*p).to_owned()).collect(),
        requests: BTreeMap::new(),
        instance_types: Vec::new(),
        min_values_relaxed: false,
    }
}

fn instance(nodeclaim: &str) -> Instance {
    Instance {
        id: format!("i-{nodeclaim}"),
        provider_id: format!("aws:///us-east-1a/i-{nodeclaim}"),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        price: 0.096,
        image_id: "ami-0123".into(),
        nodeclaim: nodeclaim.into(),
        nodepool: "default".into(),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    }
}

fn binding(pod: &str, node: &str) -> Binding {
    Binding {
        pod: pod.into(),
        node: node.into(),
    }
}

#[test]
fn a_pod_is_pending_once_until_it_binds_and_its_wait_is_measured() {
    let mut book = PodBook::default();
    assert!(book.pend(pod("a", None), 1_000));
    assert!(!book.pend(pod("a", None), 2_000), "pending already");
    book.track(&plan("c1", &["a"]));
    assert!(!book.pend(pod("a", None), 3_000), "nominated already");
    let bound = book.bind("a", "node-1", 4_500);
    assert_eq!(bound.waited_ms, Some(3_500));
    assert_eq!(bound.before.unwrap().node, "");
    assert!(book.idle());
    assert!(
        book.nominated_claims().is_empty(),
        "its claim has no pod left"
    );
    // Seen on its node now: deleting it says so.
    assert_eq!(book.delete("a").unwrap().node, "node-1");
    assert_eq!(book.delete("a"), None);
}

#[test]
fn a_round_nominates_to_claims_leaves_to_kube_scheduler_and_marks_the_rest() {
    let mut book = PodBook::default();
    for uid in ["a", "b", "c", "d"] {
        book.pend(pod(uid, None), 0);
    }
    let nominated = book.track(&plan("c1", &["a"]));
    assert_eq!(nominated.len(), 1);
    // b onto the claim on its way, c onto a running node, d nowhere.
    book.placed(
        &[binding("b", "c1"), binding("c", "node-1")],
        [("d", "no instance type fits")],
        10,
    );
    assert_eq!(book.nominated_count(), 2);
    assert_eq!(
        book.pending().keys().collect::<Vec<_>>(),
        ["c", "d"],
        "a pod left on a running node stays pending until it binds"
    );
    assert_eq!(book.left().len(), 1);
    assert_eq!(book.unschedulable().keys().collect::<Vec<_>>(), ["d"]);
    let on_way: Vec<_> = book
        .on_their_way()
        .map(|(c, p)| (c, p.uid.as_str()))
        .collect();
    assert_eq!(on_way, [("c1", "a"), ("c1", "b")]);
    // The next round's unschedulable pods replace the last's.
    book.placed(&[], [], 20);
    assert!(book.unschedulable().is_empty());
    assert_eq!(book.round_pods().len(), 2);
}

#[test]
fn a_claim_that_ends_returns_its_pods_and_one_with_pods_is_not_held() {
    let mut book = PodBook::default();
    book.pend(pod("a", None), 0);
    book.pend(pod("b", None), 0);
    book.track(&plan("c1", &["a", "b"]));
    book.track(&plan("c2", &[]));
    let claims = ["c1".to_owned(), "c2".to_owned()];
    assert_eq!(
        book.hold(&claims, vec!["node-1".into()], false),
        Err(vec!["c1".to_owned()])
    );
    assert!(!book.held("node-1"));
    assert_eq!(book.hold(&claims, vec!["node-1".into()], true), Ok(()));
    assert!(book.held("node-1"));
    book.release(&["node-1".to_owned()]);
    assert!(!book.held("node-1"));
    book.bind("a", "node-2", 5);
    assert_eq!(book.claim_ended("c1"), 1, "only the pod not bound yet");
    assert_eq!(book.pending().keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(book.claim_ended("c1"), 0);
}

#[test]
fn nomination_checks_see_launched_claims_and_what_is_in_flight_elsewhere() {
    let mut book = PodBook::default();
    book.pend(pod("a", None), 0);
    book.pend(pod("b", None), 0);
    book.track(&plan("c1", &["a"]));
    book.track(&plan("c2", &["b"]));
    assert!(!book.waiting(), "nothing launched, nothing left");
    book.launched("c1", instance("c1"), BTreeMap::new());
    assert!(book.waiting());
    let (claims, elsewhere) = book.nominations();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].pods[0].uid, "a");
    assert!(elsewhere, "b waits for c2, not launched yet");
    book.launched("c2", instance("c2"), BTreeMap::new());
    assert!(!book.nominations().1);
    book.reserve(vec![("c2".into(), pod("moving", None))]);
    assert!(book.nominations().1, "a pod moves onto a replacement");
    book.release_reservations(&["c2".to_owned()]);
    assert!(!book.nominations().1);
    // c1's nomination runs out: a is pending again and c1's clock is what the check set.
    let outcome = NominationOutcome {
        expired: vec![Expired {
            uid: "a".into(),
            nodeclaim: "c1".into(),
            node: "node-1".into(),
        }],
        open_since: [("c2".to_owned(), 7)].into(),
        left_since: BTreeMap::new(),
    };
    let ended = book.checked(&outcome);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].1.as_deref(), Some("default/a"));
    assert!(book.pending().contains_key("a"));
    let (claims, _) = book.nominations();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (claims[0].nodeclaim.as_str(), claims[0].open_since_ms),
        ("c2", Some(7))
    );
}

#[test]
fn a_workload_scales_out_while_its_pods_wait_for_nodes() {
    let mut book = PodBook::default();
    book.pend(pod("web-1", Some("ReplicaSet/web")), 0);
    book.pend(pod("web-2", Some("ReplicaSet/web")), 0);
    book.pend(pod("api-1", Some("ReplicaSet/api")), 0);
    book.pend(pod("solo", None), 0);
    let mut blocked = pod("db-0", Some("StatefulSet/db"));
    blocked.blocked = Some("restricted label".into());
    book.pend(blocked, 0);
    book.track(&plan("c1", &["web-1"]));
    book.placed(&[], [("api-1", "no instance type fits")], 0);
    assert_eq!(
        book.scaling_out().into_iter().collect::<Vec<_>>(),
        ["default/ReplicaSet/web"],
        "pending and nominated pods count; unschedulable, blocked and ownerless ones do not"
    );
    book.bind("web-2", "node-1", 1);
    assert_eq!(book.scaling_out().len(), 1, "web-1 still waits for c1");
    book.bind("web-1", "c1-node", 2);
    assert!(book.scaling_out().is_empty());
}

#[test]
fn a_round_repeats_the_last_solved_one_only_with_the_same_input_and_in_time() {
    let last = LastSolved::new(
        4,
        Some(b"{\"pods\":[]}".to_vec()),
        1_000,
        SchedulingResult::default(),
    );
    let keep = 60_000;
    assert_eq!(
        last.repeated_by(Some(b"{\"pods\":[]}"), 2_000, keep)
            .map(|(r, _)| r),
        Some(4)
    );
    assert!(
        last.repeated_by(Some(b"{\"pods\":[1]}"), 2_000, keep)
            .is_none()
    );
    assert!(last.repeated_by(None, 2_000, keep).is_none());
    assert!(
        last.repeated_by(Some(b"{\"pods\":[]}"), 61_000, keep)
            .is_none(),
        "the journal may have trimmed its input"
    );
    let unrecorded = LastSolved::new(5, None, 1_000, SchedulingResult::default());
    assert!(unrecorded.repeated_by(None, 1_000, keep).is_none());
}
