#![allow(clippy::unwrap_used)]

use super::*;
use crate::disruption::pass;
use crate::disruption::test_support::{base, node, nodes_budget, pod, snapshot};
use crate::model::{ResourceName, Resources};

fn cluster() -> (Snapshot, SchedulingInput) {
    let mut s = snapshot(vec![
        node("a", "default", vec![pod("a-0", true)]),
        node("b", "default", vec![pod("b-0", true)]),
    ]);
    nodes_budget(&mut s, "default", "100%");
    let input = base("default", &[("node-a", 0), ("node-b", 0), ("spare", 2)]);
    (s, input)
}

#[test]
fn a_command_holds_while_nothing_changed() {
    let (s, input) = cluster();
    let decision = pass::run(&s, Some(&input)).command.unwrap();
    assert!(decision.method.consolidates());
    assert_eq!(decision.candidates.len(), 2);
    assert_eq!(validate(&decision, &s, Some(&input)), Ok(()));
}

#[test]
fn a_command_is_rejected_when_its_candidates_budgets_or_simulation_changed() {
    let (s, input) = cluster();
    let decision = pass::run(&s, Some(&input)).command.unwrap();

    let mut gone = s.clone();
    gone.nodes.retain(|n| n.nodeclaim != "b");
    assert_eq!(
        validate(&decision, &gone, Some(&input)),
        Err(Rejected::Gone("b".into()))
    );

    let mut nominated = s.clone();
    nominated.nodes[0].nominated = true;
    assert!(matches!(
        validate(&decision, &nominated, Some(&input)),
        Err(Rejected::NotCandidate { nodeclaim, .. }) if nodeclaim == "a"
    ));

    let mut busy = s.clone();
    busy.nodes[1].last_pod_event_ms = Some(busy.now_ms);
    busy.pools[0].consolidate_after = Some(std::time::Duration::from_secs(60));
    assert!(matches!(
        validate(&decision, &busy, Some(&input)),
        Err(Rejected::NotCandidate { nodeclaim, .. }) if nodeclaim == "b"
    ));

    let mut frozen = s.clone();
    nodes_budget(&mut frozen, "default", "1");
    assert_eq!(
        validate(&decision, &frozen, Some(&input)),
        Err(Rejected::Budget {
            pool: "default".into(),
            allowed: 1,
            wanted: 2
        })
    );

    // Pods arrived on the spare node meanwhile: the candidates' two pods now need a new
    // node, and the only type that holds both costs what the candidates do.
    let mut full = input.clone();
    std::sync::Arc::make_mut(&mut full.existing[2]).requested =
        Resources::cpu_memory(2000, 1 << 30).with(ResourceName::Pods, 2);
    assert_eq!(
        validate(&decision, &s, Some(&full)),
        Err(Rejected::Unconsolidatable(Unconsolidatable::NotCheaper))
    );
    // With one of them left as it was, the other's pod now needs a (cheaper) new node: a
    // different command than the delete decided.
    let mut one = decision.clone();
    one.candidates.truncate(1);
    assert_eq!(
        validate(&one, &s, Some(&full)),
        Err(Rejected::Changed(
            "the candidates' pods no longer fit without a replacement".into()
        ))
    );

    assert_eq!(validate(&decision, &s, None), Err(Rejected::NoRound));
}

#[test]
fn a_replacement_holds_only_with_the_instance_types_decided() {
    // One node whose pod fits nowhere else: replaced by the small type.
    let s = snapshot(vec![node("a", "default", vec![pod("a-0", true)])]);
    let input = base("default", &[("node-a", 0)]);
    let decision = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(decision.replacements.len(), 1);
    assert_eq!(validate(&decision, &s, Some(&input)), Ok(()));
    // Room appeared: the pod now fits without a replacement.
    let roomy = base("default", &[("node-a", 0), ("spare", 2)]);
    assert_eq!(
        validate(&decision, &s, Some(&roomy)),
        Err(Rejected::Changed(
            "the candidates' pods now fit without a replacement".into()
        ))
    );
    // The decided replacement lists fewer types than a new simulation would allow.
    let mut narrow = decision.clone();
    narrow.replacements[0].instance_types.truncate(0);
    assert!(matches!(
        validate(&narrow, &s, Some(&input)),
        Err(Rejected::Changed(_))
    ));
}
