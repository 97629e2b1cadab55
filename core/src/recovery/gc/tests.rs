use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::CapacityType;
use crate::ports::{Instance, InstanceState};

const NOW: i64 = 1_800_000_000_000;
const GRACE: Duration = Duration::from_secs(300);

fn instance(
    id: &str,
    nodeclaim: &str,
    state: InstanceState,
    launched_at_ms: Option<i64>,
) -> Instance {
    Instance {
        id: id.into(),
        provider_id: format!("aws:///a/{id}"),
        instance_type: "m5.large".into(),
        zone: "a".into(),
        capacity_type: CapacityType::OnDemand,
        price: 0.1,
        image_id: "ami".into(),
        nodeclaim: nodeclaim.into(),
        nodepool: "default".into(),
        state,
        launched_at_ms,
        price_source: None,
        reservation: None,
    }
}

fn claim(name: &str, instance_id: &str, launched_at_ms: Option<i64>) -> LiveClaim {
    LiveClaim {
        name: name.into(),
        instance_id: instance_id.into(),
        launched_at_ms,
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs two passes over the same world and returns the second's plan.
fn twice(input: &GcInput<'_>) -> GcPlan {
    let first = plan(input, &GcMemory::default());
    plan(input, &first.memory)
}

#[test]
fn an_unowned_old_tagged_instance_is_collected_on_the_second_pass_only() {
    let instances = [instance("i-leaked", "b", InstanceState::Running, Some(0))];
    let input = GcInput {
        instances: &instances,
        owners: &names(&["a"]),
        claims: &[],
        gone: &BTreeSet::new(),
        now_ms: NOW,
        grace: GRACE,
    };
    let first = plan(&input, &GcMemory::default());
    assert!(first.leaked.is_empty(), "one sighting is not enough");
    let second = plan(&input, &first.memory);
    assert_eq!(second.leaked, vec![("i-leaked".to_owned(), "b".to_owned())]);
    // A pass in between that did not see it collectable starts the count again.
    let owned_meanwhile = GcInput {
        owners: &names(&["b"]),
        ..input
    };
    let between = plan(&owned_meanwhile, &first.memory);
    assert!(between.leaked.is_empty());
    assert!(plan(&input, &between.memory).leaked.is_empty());
}

#[test]
fn young_untimed_untagged_owned_and_held_instances_are_never_collected() {
    let instances = [
        instance("i-young", "b", InstanceState::Running, Some(NOW - 1_000)),
        instance("i-untimed", "c", InstanceState::Running, None),
        instance("i-untagged", "", InstanceState::Running, Some(0)),
        instance("i-intent", "launching", InstanceState::Running, Some(0)),
        instance("i-held", "renamed", InstanceState::Running, Some(0)),
        instance("i-dead", "d", InstanceState::Terminated, Some(0)),
    ];
    let claims = [claim("holder", "i-held", Some(0))];
    let input = GcInput {
        instances: &instances,
        owners: &names(&["launching", "holder"]),
        claims: &claims,
        gone: &BTreeSet::new(),
        now_ms: NOW,
        grace: GRACE,
    };
    let decided = twice(&input);
    assert!(decided.leaked.is_empty(), "{decided:?}");
    assert_eq!(decided.untagged, vec!["i-untagged".to_owned()]);
}

#[test]
fn a_claim_ends_at_once_on_a_terminated_listing_and_after_two_passes_when_gone() {
    let instances = [
        instance("i-owned", "a", InstanceState::Running, Some(0)),
        instance("i-dead", "d", InstanceState::Terminated, Some(0)),
    ];
    let claims = [
        claim("a", "i-owned", Some(0)),
        claim("d", "i-dead", Some(0)),
        claim("f", "i-vanished", Some(0)),
        claim("g", "i-not-yet-listed", Some(0)),
        claim("h", "i-just-launched", Some(NOW - 2_000)),
        claim("u", "i-untimed", None),
    ];
    let gone = names(&["i-vanished", "i-just-launched", "i-untimed"]);
    let input = GcInput {
        instances: &instances,
        owners: &names(&["a", "d", "f", "g", "h", "u"]),
        claims: &claims,
        gone: &gone,
        now_ms: NOW,
        grace: GRACE,
    };
    let first = plan(&input, &GcMemory::default());
    assert_eq!(first.orphaned, vec![("d".to_owned(), "i-dead".to_owned())]);
    let second = plan(&input, &first.memory);
    assert_eq!(
        second.orphaned,
        vec![
            ("d".to_owned(), "i-dead".to_owned()),
            ("f".to_owned(), "i-vanished".to_owned()),
            ("u".to_owned(), "i-untimed".to_owned()),
        ]
    );
}

/// A listing: each instance id at most once, as a cloud lists them.
fn arb_listing() -> impl Strategy<Value = Vec<Instance>> {
    proptest::collection::btree_map(
        0usize..8,
        (
            prop_oneof![
                Just(String::new()),
                (0usize..6).prop_map(|n| format!("nc-{n}"))
            ],
            prop_oneof![
                Just(InstanceState::Running),
                Just(InstanceState::ShuttingDown),
                Just(InstanceState::Terminated)
            ],
            prop_oneof![
                Just(None),
                (0i64..1_000_000).prop_map(|ago| Some(NOW - ago))
            ],
        ),
        0..8,
    )
    .prop_map(|listed| {
        listed
            .into_iter()
            .map(|(id, (tag, state, launched))| instance(&format!("i-{id}"), &tag, state, launched))
            .collect()
    })
}

fn arb_names() -> impl Strategy<Value = BTreeSet<String>> {
    proptest::collection::btree_set((0usize..6).prop_map(|n| format!("nc-{n}")), 0..6)
}

fn arb_claims() -> impl Strategy<Value = Vec<LiveClaim>> {
    proptest::collection::vec(
        (
            0usize..6,
            0usize..10,
            prop_oneof![
                Just(None),
                (0i64..1_000_000).prop_map(|ago| Some(NOW - ago))
            ],
        )
            .prop_map(|(n, i, at)| claim(&format!("nc-{n}"), &format!("i-{i}"), at)),
        0..5,
    )
}

fn arb_memory() -> impl Strategy<Value = GcMemory> {
    (
        proptest::collection::btree_set(
            (
                (0usize..8).prop_map(|i| format!("i-{i}")),
                (0usize..6).prop_map(|n| format!("nc-{n}")),
            ),
            0..8,
        ),
        proptest::collection::btree_set(
            (
                (0usize..6).prop_map(|n| format!("nc-{n}")),
                (0usize..10).prop_map(|i| format!("i-{i}")),
            ),
            0..8,
        ),
    )
        .prop_map(|(collectable, missing)| GcMemory {
            collectable,
            missing,
        })
}

proptest! {
    /// Whatever the listing says and whatever an earlier pass remembered, no instance that
    /// is younger than the grace period, of unknown age, untagged, named by an owner (a live
    /// NodeClaim or an open launch intent), held by a live NodeClaim, or not seen
    /// collectable by the previous pass is in the plan.
    #[test]
    fn nothing_fresh_untagged_or_owned_is_ever_collected(
        instances in arb_listing(),
        owners in arb_names(),
        claims in arb_claims(),
        gone in proptest::collection::btree_set((0usize..10).prop_map(|i| format!("i-{i}")), 0..4),
        previous in arb_memory(),
        grace_s in 0u64..600,
    ) {
        let grace = Duration::from_secs(grace_s);
        let input = GcInput { instances: &instances, owners: &owners, claims: &claims, gone: &gone, now_ms: NOW, grace };
        let decided = plan(&input, &previous);
        for (id, tag) in &decided.leaked {
            prop_assert!(!tag.is_empty(), "untagged {id} collected");
            prop_assert!(!owners.contains(tag), "{id} of owner {tag} collected");
            prop_assert!(!claims.iter().any(|c| &c.instance_id == id), "held {id} collected");
            prop_assert!(previous.collectable.contains(&(id.clone(), tag.clone())), "{id} collected on one sighting");
            let listed: Vec<&Instance> = instances.iter().filter(|i| &i.id == id && &i.nodeclaim == tag).collect();
            prop_assert!(!listed.is_empty());
            for i in listed {
                prop_assert_eq!(i.state, InstanceState::Running);
                let at = i.launched_at_ms;
                prop_assert!(at.is_some_and(|at| NOW - at >= grace_s as i64 * 1000), "{} of age {:?} collected", id, at);
            }
        }
        // Whatever is collected now was remembered as collectable; a first pass collects nothing.
        prop_assert!(plan(&input, &GcMemory::default()).leaked.is_empty());
        // A NodeClaim whose instance is listed running is never finalized.
        for (name, id) in &decided.orphaned {
            prop_assert!(!instances.iter().any(|i| &i.id == id && i.state == InstanceState::Running), "{name} finalized with {id} running");
        }
    }

    /// And what is truly leaked (old, tagged, owned by no one, held by no one, listed on two
    /// consecutive passes) is collected on the second.
    #[test]
    fn every_true_leak_is_collected_on_the_second_pass(
        instances in arb_listing(),
        owners in arb_names(),
        claims in arb_claims(),
    ) {
        let input = GcInput { instances: &instances, owners: &owners, claims: &claims, gone: &BTreeSet::new(), now_ms: NOW, grace: GRACE };
        let decided = twice(&input);
        for i in &instances {
            let leak = i.state == InstanceState::Running
                && !i.nodeclaim.is_empty()
                && !owners.contains(&i.nodeclaim)
                && !claims.iter().any(|c| c.instance_id == i.id)
                && i.launched_at_ms.is_some_and(|at| NOW - at >= GRACE.as_millis() as i64);
            prop_assert_eq!(leak, decided.leaked.contains(&(i.id.clone(), i.nodeclaim.clone())), "{:?}", i);
        }
    }
}
