//! What a round is given about nodes and NodeClaims, and what its decisions are named.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::model::instance_type::Offering;
use crate::model::{CapacityType, InstanceType, Requirement, Taint, Toleration};
use crate::ports::InstanceState;
use crate::scheduling::{Limits, PlannedNodeClaim};

const GIB: i64 = 1 << 30;

fn node(name: &str, provider_id: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        provider_id: provider_id.into(),
        labels: [("kubernetes.io/hostname".to_owned(), name.to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(4000, 16 * GIB),
        requested: Resources::cpu_memory(500, GIB),
        daemon_requested: Resources::ZERO,
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        ready: true,
        unschedulable: false,
    }
}

fn instance(id: &str) -> Instance {
    Instance {
        id: id.into(),
        provider_id: format!("aws:///a/{id}"),
        instance_type: "m.large".into(),
        zone: "a".into(),
        capacity_type: CapacityType::Spot,
        price: 0.03,
        image_id: "ami-1".into(),
        nodeclaim: String::new(),
        nodepool: "default".into(),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    }
}

fn template() -> NodePoolTemplate {
    let mut requirements = Requirements::new();
    requirements.add("team", Requirement::is_in(["web"]));
    requirements.add(
        "topology.kubernetes.io/zone",
        Requirement::is_in(["a", "b"]),
    );
    NodePoolTemplate {
        name: "default".into(),
        weight: 0,
        requirements,
        taints: vec![Taint::new("dedicated", "web", "NoSchedule")],
        startup_taints: Vec::new(),
        instance_types: vec![Arc::new(InstanceType::new(
            "m.large",
            BTreeMap::new(),
            Resources::cpu_memory(2000, 8 * GIB),
            Resources::cpu_memory(100, GIB),
            vec![Offering::new("a", CapacityType::Spot, 0.03, true)],
        ))],
        limits: Limits::default(),
        usage: Resources::ZERO,
        node_count: 0,
    }
}

fn pod(uid: &str, cpu: i64) -> Pod {
    let mut pod = Pod::simple(uid, cpu, GIB);
    pod.labels.insert("app".into(), "web".into());
    pod
}

#[test]
fn pods_nominated_to_a_nodeclaim_count_on_its_node_once_it_joined() {
    let launched = instance("i-1");
    let claims = [InFlight {
        name: "default-abcde",
        nodepool: "default",
        instance: Some(&launched),
        labels: None,
    }];
    let (a, b) = (pod("a", 1000), pod("b", 250));
    let nodes = vec![node("n-2", "aws:///a/i-2"), node("n-1", "aws:///a/i-1")];
    let out = existing_nodes(
        nodes,
        &claims,
        [("default-abcde", &a), ("default-abcde", &b)],
        &[template()],
        &[],
    );
    // The joined node stands for the NodeClaim: no second entry for it, names in order.
    let names: Vec<&str> = out.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n-1", "n-2"]);
    assert_eq!(
        out[0].requested,
        Resources::cpu_memory(1750, 3 * GIB).with(crate::model::ResourceName::Pods, 2)
    );
    assert_eq!(out[0].pods.len(), 2);
    assert_eq!(out[1].requested, Resources::cpu_memory(500, GIB));
}

#[test]
fn a_cordoned_node_is_tainted_unschedulable_and_its_nodeclaim_is_not_capacity_on_its_way() {
    let launched = instance("i-1");
    let claims = [InFlight {
        name: "default-abcde",
        nodepool: "default",
        instance: Some(&launched),
        labels: None,
    }];
    let mut cordoned = node("n-1", "aws:///a/i-1");
    cordoned.unschedulable = true;
    let out = existing_nodes(vec![cordoned], &claims, [], &[template()], &[]);
    assert_eq!(
        out.len(),
        1,
        "the node only, not its NodeClaim again: {out:?}"
    );
    assert_eq!(out[0].name, "n-1");
    let unschedulable: Vec<_> = out[0]
        .taints
        .iter()
        .filter(|t| t.key == labels::UNSCHEDULABLE_TAINT)
        .collect();
    assert_eq!(unschedulable.len(), 1, "{:?}", out[0].taints);
    assert_eq!(unschedulable[0].effect, "NoSchedule");
}

#[test]
fn a_launched_nodeclaim_not_joined_is_the_node_it_will_be() {
    let launched = instance("i-1");
    let claims = [
        InFlight {
            name: "default-abcde",
            nodepool: "default",
            instance: Some(&launched),
            labels: None,
        },
        // Not launched yet: no node to bind to.
        InFlight {
            name: "default-fghjk",
            nodepool: "default",
            instance: None,
            labels: None,
        },
    ];
    let nominated = pod("a", 1000);
    let mut tolerant = pod("ds-tolerant", 100);
    tolerant.tolerations.push(Toleration {
        key: "dedicated".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    let daemonsets = [tolerant, pod("ds-intolerant", 300)];
    let out = existing_nodes(
        Vec::new(),
        &claims,
        [("default-abcde", &nominated)],
        &[template()],
        &daemonsets,
    );
    assert_eq!(out.len(), 1);
    let node = &out[0];
    assert_eq!(node.name, "default-abcde");
    // Its allocatable, less what only the daemonsets tolerating its taints and the
    // nominated pod use.
    assert_eq!(node.allocatable, Resources::cpu_memory(1900, 7 * GIB));
    assert_eq!(node.requested.get(crate::model::ResourceName::Cpu), 1100);
    assert_eq!(node.taints, template().taints);
    // Labels: its instance's, its pool's, and the pool's single-valued requirements.
    assert_eq!(node.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(node.labels["team"], "web");
    assert_eq!(node.labels["topology.kubernetes.io/zone"], "a");
    assert_eq!(node.labels["node.kubernetes.io/instance-type"], "m.large");
    assert!(node.attach_limits.is_empty());
}

#[test]
fn a_launched_nodeclaim_carries_only_the_daemonsets_that_run_on_it_with_their_host_ports() {
    let launched = instance("i-1");
    let claims = [InFlight {
        name: "default-abcde",
        nodepool: "default",
        instance: Some(&launched),
        labels: None,
    }];
    let tolerant = |uid: &str, cpu: i64| {
        let mut ds = pod(uid, cpu);
        ds.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: String::new(),
        });
        ds
    };
    let mut logs = tolerant("ds-logs", 100);
    logs.host_ports = vec![crate::model::pod::HostPort {
        ip: "0.0.0.0".into(),
        protocol: "TCP".into(),
        port: 8080,
    }];
    let mut elsewhere = tolerant("ds-other-zone", 300);
    elsewhere
        .node_selector
        .add("topology.kubernetes.io/zone", Requirement::is_in(["b"]));
    let out = existing_nodes(Vec::new(), &claims, [], &[template()], &[logs, elsewhere]);
    let node = &out[0];
    assert_eq!(
        node.requested.get(crate::model::ResourceName::Cpu),
        100,
        "the daemonset selecting zone b does not run on a node in zone a"
    );
    assert_eq!(node.host_ports.len(), 1, "{:?}", node.host_ports);
    assert_eq!(node.host_ports[0].port, 8080);
}

#[test]
fn planned_nodeclaims_are_named_after_their_pool_with_stable_distinct_suffixes() {
    assert_eq!(suffix(0, 1, 0), suffix(0, 1, 0));
    assert_eq!(suffix(0, 1, 0).len(), 5);
    let all: std::collections::BTreeSet<String> = (0..200).map(|i| suffix(0, 3, i)).collect();
    assert_eq!(all.len(), 200);
    assert_ne!(
        suffix(1, 3, 0),
        suffix(2, 3, 0),
        "the seed keeps processes apart"
    );
    let claim = PlannedNodeClaim {
        nodepool: "default".into(),
        requirements: Requirements::new(),
        instance_types: Vec::new(),
        pods: vec!["a".into()],
        requests: Resources::cpu_memory(1500, 4 * GIB),
        min_values_relaxed: true,
    };
    let result = SchedulingResult {
        new_claims: vec![claim.clone(), claim],
        ..Default::default()
    };
    let named = plans(&result, 7, 0);
    assert_eq!(named[0].0.nodeclaim, format!("default-{}", suffix(0, 7, 0)));
    assert_eq!(named[1].0.nodeclaim, format!("default-{}", suffix(0, 7, 1)));
    assert_eq!(named[0].0.requests["cpu"], "1500m");
    assert_eq!(named[0].0.requests["memory"], "4Gi");
    assert!(named[0].0.min_values_relaxed);
    assert_eq!(named[0].0.round, 7);
    // A pod refused by running nodes launches a NodeClaim without the hostname requirement
    // (the API server refuses it there).
    let mut refused = result.new_claims[0].clone();
    refused
        .requirements
        .add(labels::HOSTNAME, Requirement::not_in(["ip-10-0-0-1"]));
    refused
        .requirements
        .add(labels::ZONE, Requirement::is_in(["us-east-1a"]));
    let (_, requirements) = plan_of(&refused, "x".into(), 8);
    assert!(!requirements.has_key(labels::HOSTNAME));
    assert!(requirements.has_key(labels::ZONE));
}

#[test]
fn a_node_not_yet_initialized_is_seen_without_its_pools_startup_taints() {
    let mut pool = template();
    pool.startup_taints = vec![Taint::new("example.com/agent-not-ready", "", "NoSchedule")];
    let starting = |name: &str, initialized: bool| {
        let mut n = node(name, &format!("aws:///a/{name}"));
        n.labels.insert(labels::NODEPOOL.into(), "default".into());
        if initialized {
            n.labels.insert(labels::INITIALIZED.into(), "true".into());
        }
        n.taints = vec![
            Taint::new("example.com/agent-not-ready", "", "NoSchedule"),
            Taint::new("dedicated", "web", "NoSchedule"),
        ];
        n
    };
    let mut unmanaged = starting("n-3", false);
    unmanaged.labels.remove(labels::NODEPOOL);
    let out = existing_nodes(
        vec![starting("n-1", false), starting("n-2", true), unmanaged],
        &[],
        [],
        &[pool],
        &[],
    );
    let keys = |i: usize| -> Vec<&str> { out[i].taints.iter().map(|t| t.key.as_str()).collect() };
    assert_eq!(
        keys(0),
        vec!["dedicated"],
        "starting: the startup taint goes away"
    );
    assert_eq!(
        keys(1),
        vec!["example.com/agent-not-ready", "dedicated"],
        "initialized: a startup taint still there is a taint"
    );
    assert_eq!(keys(2).len(), 2, "not the pool's node");
}

#[test]
fn a_launched_nodeclaim_is_seen_with_its_nodeclaims_labels_or_those_its_pool_gives() {
    let launched = [instance("i-1"), instance("i-2")];
    let mut template = template();
    template
        .requirements
        .add("test-key-4", Requirement::exists());
    template
        .requirements
        .add("test-key-2", Requirement::not_in(["0"]));
    let written: BTreeMap<String, String> = [("test-key-4".to_owned(), "7".to_owned())].into();
    let claims = [
        InFlight {
            name: "default-abcde",
            nodepool: "default",
            instance: Some(&launched[0]),
            labels: Some(&written),
        },
        // Its labels not known here: those any NodeClaim of the pool gets.
        InFlight {
            name: "default-fghjk",
            nodepool: "default",
            instance: Some(&launched[1]),
            labels: None,
        },
    ];
    let out = existing_nodes(
        Vec::new(),
        &claims,
        std::iter::empty::<(&str, &Pod)>(),
        &[template],
        &[],
    );
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].labels["test-key-4"], "7");
    assert!(!out[0].labels.contains_key("test-key-2"));
    assert_eq!(out[1].labels["test-key-4"], "0");
    assert_eq!(out[1].labels["test-key-2"], "1");
    assert_eq!(out[1].labels["team"], "web");
}
