use std::collections::BTreeMap;

use super::*;

const WINDOW: i64 = 20_000;

fn node(name: &str, ready: bool, unschedulable: bool) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        provider_id: format!("sim:///{name}"),
        ready,
        unschedulable,
        taints: Vec::new(),
    }
}

fn claim(name: &str, node: &str, pods: &[&str], open_since_ms: Option<i64>) -> NominatedClaim {
    NominatedClaim {
        nodeclaim: name.into(),
        provider_id: format!("sim:///{node}"),
        pods: pods
            .iter()
            .map(|uid| NominatedPod {
                uid: (*uid).into(),
                tolerations: Vec::new(),
            })
            .collect(),
        open_since_ms,
    }
}

fn at(s: i64) -> i64 {
    s * 1000
}

fn input(
    at_ms: i64,
    nodes: Vec<NodeFacts>,
    claims: Vec<NominatedClaim>,
    left: Vec<LeftPod>,
) -> NominationCheck {
    NominationCheck {
        at_ms,
        window_ms: WINDOW,
        nodes,
        claims,
        left,
        in_flight_elsewhere: false,
    }
}

#[test]
fn a_nomination_expires_after_its_node_was_open_for_the_window() {
    let nodes = vec![node("n1", true, false)];
    // First seen open at 10 s: the clock starts.
    let first = check(&input(
        at(10),
        nodes.clone(),
        vec![claim("c1", "n1", &["a", "b"], None)],
        vec![],
    ));
    assert!(first.expired.is_empty());
    assert_eq!(
        first.open_since,
        BTreeMap::from([("c1".to_owned(), at(10))])
    );
    let first_input = input(
        at(10),
        nodes.clone(),
        vec![claim("c1", "n1", &["a"], None)],
        vec![],
    );
    assert!(check(&first_input).worth_recording(&first_input));
    // 19 s later: still waiting.
    let waiting = check(&input(
        at(29),
        nodes.clone(),
        vec![claim("c1", "n1", &["a", "b"], Some(at(10)))],
        vec![],
    ));
    assert!(waiting.expired.is_empty());
    // 20 s: both pods are pending again.
    let expired = check(&input(
        at(30),
        nodes,
        vec![claim("c1", "n1", &["a", "b"], Some(at(10)))],
        vec![],
    ));
    assert_eq!(
        expired.expired,
        vec![
            Expired {
                uid: "a".into(),
                nodeclaim: "c1".into(),
                node: "n1".into()
            },
            Expired {
                uid: "b".into(),
                nodeclaim: "c1".into(),
                node: "n1".into()
            },
        ]
    );
    assert!(expired.open_since.is_empty());
}

#[test]
fn a_closed_node_restarts_the_clock_and_such_a_check_is_not_recorded() {
    let claims = vec![claim("c1", "n1", &["a"], Some(0))];
    for closed in [
        vec![node("n1", false, false)],
        vec![node("n1", true, true)],
        vec![],
    ] {
        let checked = input(at(100), closed, claims.clone(), vec![]);
        let outcome = check(&checked);
        assert!(outcome.expired.is_empty());
        assert!(outcome.open_since.is_empty(), "the clock starts again");
        assert!(!outcome.worth_recording(&checked));
    }
    // A taint a nominated pod does not tolerate closes the node to it.
    let mut tainted = node("n1", true, false);
    tainted.taints.push(Taint {
        key: "example.com/startup".into(),
        value: String::new(),
        effect: "NoSchedule".into(),
    });
    assert!(
        check(&input(
            at(100),
            vec![tainted.clone()],
            claims.clone(),
            vec![]
        ))
        .open_since
        .is_empty()
    );
    let mut tolerating = claims;
    tolerating[0].pods[0].tolerations.push(Toleration {
        key: "example.com/startup".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    assert_eq!(
        check(&input(at(100), vec![tainted], tolerating, vec![]))
            .expired
            .len(),
        1
    );
}

#[test]
fn a_node_that_does_not_take_a_left_pod_within_the_window_is_refused_to_it() {
    let mut left = LeftToKubeScheduler::default();
    left.placed([("a", "n1"), ("b", "n1")], 0);
    let nodes = vec![node("n1", true, false), node("n2", true, false)];
    let checked = input(at(19), nodes.clone(), vec![], left.waiting());
    let outcome = check(&checked);
    assert!(outcome.expired.is_empty());
    assert!(outcome.worth_recording(&checked), "its clocks run");
    left.apply(&outcome);
    // Placed on n1 again: the clock keeps running; b is placed elsewhere and starts anew.
    left.placed([("a", "n1"), ("b", "n2")], at(10));
    let outcome = check(&input(at(21), nodes, vec![], left.waiting()));
    assert_eq!(
        outcome.expired,
        vec![Expired {
            uid: "a".into(),
            nodeclaim: String::new(),
            node: "n1".into()
        }]
    );
    left.apply(&outcome);
    assert_eq!(left.len(), 1, "b still waits on n2");
    let shaped = left.shape(&Pod::simple("a", 500, 1 << 30));
    let hostname_allows = |pod: &Pod, node: &str| {
        let labels = BTreeMap::from([(HOSTNAME.to_owned(), node.to_owned())]);
        pod.node_selector.matches_labels(&labels).is_ok()
    };
    assert!(!hostname_allows(&shaped, "n1"));
    assert!(hostname_allows(&shaped, "n2"));
    let req = shaped
        .node_selector
        .get(HOSTNAME)
        .expect("a hostname requirement");
    assert!(
        req.allows_absent(),
        "a NodeClaim yet to launch has no hostname"
    );
    assert!(
        left.shape(&Pod::simple("b", 500, 1 << 30))
            .node_selector
            .get(HOSTNAME)
            .is_none()
    );
    left.forget("a");
    assert!(
        left.shape(&Pod::simple("a", 500, 1 << 30))
            .node_selector
            .get(HOSTNAME)
            .is_none()
    );
}

/// Runs a check of `left`'s pods and carries it out; returns how many left pods expired.
fn run(
    left: &mut LeftToKubeScheduler,
    at_ms: i64,
    nodes: Vec<NodeFacts>,
    claims: Vec<NominatedClaim>,
    elsewhere: bool,
) -> usize {
    let mut checked = input(at_ms, nodes, claims, left.waiting());
    checked.in_flight_elsewhere = elsewhere;
    let outcome = check(&checked);
    left.apply(&outcome);
    outcome
        .expired
        .into_iter()
        .filter(|e| e.nodeclaim.is_empty())
        .count()
}

#[test]
fn a_left_pods_clock_runs_only_while_its_node_could_take_it_and_nothing_is_in_flight() {
    let mut left = LeftToKubeScheduler::default();
    left.placed([("a", "n1")], 0);
    let up = || vec![node("n1", true, false)];
    // Not Ready at 15 s, cordoned at 30 s: each time the clock starts again.
    assert_eq!(
        run(
            &mut left,
            at(15),
            vec![node("n1", false, false)],
            vec![],
            false
        ),
        0
    );
    assert_eq!(
        run(
            &mut left,
            at(30),
            vec![node("n1", true, true)],
            vec![],
            false
        ),
        0
    );
    // Pods in flight at 40 s (elsewhere), and at 50 s (nominated to a NodeClaim whose node
    // is not open yet): the clock starts again each time.
    assert_eq!(run(&mut left, at(40), up(), vec![], true), 0);
    assert_eq!(
        run(
            &mut left,
            at(50),
            up(),
            vec![claim("c1", "n9", &["x"], None)],
            false
        ),
        0
    );
    assert_eq!(run(&mut left, at(69), up(), vec![], false), 0);
    assert_eq!(run(&mut left, at(71), up(), vec![], false), 1);
    // A node that is gone never expires a pod.
    left.placed([("b", "n9")], 0);
    assert_eq!(run(&mut left, at(100), vec![], vec![], false), 0);
}

#[test]
fn nominations_that_expire_in_a_check_no_longer_hold_left_pods_back() {
    // The only nominated pods expire in this check: nothing is in flight for the left pod.
    let nodes = vec![node("n1", true, false), node("n2", true, false)];
    let claims = vec![claim("c1", "n2", &["x"], Some(0))];
    let left = vec![LeftPod {
        uid: "a".into(),
        node: "n1".into(),
        since_ms: 0,
    }];
    let outcome = check(&input(at(30), nodes, claims, left));
    let uids: Vec<&str> = outcome.expired.iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(uids, ["x", "a"]);
}
