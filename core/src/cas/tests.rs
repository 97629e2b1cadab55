#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::model::instance_type::{CapacityType, Offering, overhead};
use crate::model::taints::Toleration;
use crate::model::{InstanceType, KubeletSettings, Pod, ResourceName, Resources, Taint};
use crate::scheduling::ExistingNode;
use crate::vocab::labels;

const GIB: i64 = 1 << 30;
const MINUTE_MS: i64 = 60_000;

/// `cpu` vCPUs and `mem` GiB, on demand at `price` and spot at 30 % of it in zones a and b.
fn it(name: &str, cpu: i64, mem: i64, price: f64) -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(cpu * 1000, mem * GIB).with(ResourceName::Pods, 110);
    let offerings = ["a", "b"]
        .into_iter()
        .flat_map(|zone| {
            [
                Offering::new(zone, CapacityType::OnDemand, price, true),
                Offering::new(zone, CapacityType::Spot, price * 0.3, true),
            ]
        })
        .collect();
    let family = name.split('.').next().unwrap();
    let type_labels: BTreeMap<String, String> = [
        (labels::INSTANCE_TYPE.to_owned(), name.to_owned()),
        (
            "karpenter.k8s.aws/instance-category".to_owned(),
            family[..1].to_owned(),
        ),
    ]
    .into();
    Arc::new(InstanceType::new(
        name,
        type_labels,
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        offerings,
    ))
}

fn catalog() -> Vec<Arc<InstanceType>> {
    let mut gpu = (*it("g5.xlarge", 4, 16, 1.0)).clone();
    gpu.capacity.set(ResourceName::NvidiaGpu, 1);
    vec![
        it("m6.large", 2, 8, 0.10),
        it("m6.xlarge", 4, 16, 0.20),
        it("m6.2xlarge", 8, 32, 0.40),
        it("c6.xlarge", 4, 8, 0.17),
        Arc::new(InstanceType::new(
            gpu.name.clone(),
            gpu.labels.clone(),
            gpu.capacity,
            gpu.overhead,
            gpu.offerings.clone(),
        )),
    ]
}

fn group(name: &str, instance_type: &str, max_size: usize) -> NodeGroup {
    NodeGroup {
        name: name.into(),
        instance_type: catalog()
            .into_iter()
            .find(|t| t.name == instance_type)
            .unwrap(),
        capacity_type: CapacityType::OnDemand,
        zones: vec!["a".into(), "b".into()],
        min_size: 0,
        max_size,
        labels: BTreeMap::new(),
        taints: Vec::new(),
    }
}

fn pods(prefix: &str, n: usize, cpu_millis: i64, mem_gib: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod::simple(&format!("{prefix}-{i:03}"), cpu_millis, mem_gib * GIB))
        .collect()
}

#[test]
fn node_groups_files_are_read_against_the_catalog_and_written_back() {
    let text = "nodeGroups:\n  - name: general\n    instanceType: m6.xlarge\n    capacityType: spot\n    zones: [a]\n    maxSize: 5\n    labels: {team: web}\n    taints: [{key: dedicated, value: web, effect: NoSchedule}]\n  - name: big\n    instanceType: m6.2xlarge\n";
    let groups = parse_groups(text, &catalog()).unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].capacity_type, CapacityType::Spot);
    assert_eq!(groups[0].zones, ["a"]);
    assert_eq!(
        groups[0].taints,
        [Taint::new("dedicated", "web", "NoSchedule")]
    );
    // Left out: on-demand, every zone offered, 0 to 1000.
    assert_eq!(groups[1].capacity_type, CapacityType::OnDemand);
    assert_eq!(groups[1].zones, ["a", "b"]);
    assert_eq!((groups[1].min_size, groups[1].max_size), (0, 1000));
    assert_eq!(
        parse_groups(&groups_yaml(&groups), &catalog()).unwrap(),
        groups
    );
}

#[test]
fn bad_node_groups_name_the_field_and_the_fix() {
    let cases = [
        ("nodeGroups: []", "no node group"),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge, size: 3}]",
            "nodeGroups[0]: unknown field `size`",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m9.huge}]",
            "nodeGroups[0].instanceType: \"m9.huge\" is not in the region's catalog",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge, capacityType: reserved}]",
            "nodeGroups[0].capacityType: \"reserved\": use spot or on-demand",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge, zones: [c]}]",
            "nodeGroups[0].zones: m6.xlarge is not offered on-demand in c; it is in a, b",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge, minSize: 3, maxSize: 2}]",
            "nodeGroups[0].minSize: 3 is above maxSize 2",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge}, {name: a, instanceType: m6.large}]",
            "nodeGroups[1].name",
        ),
        (
            "nodeGroups: [{name: a, instanceType: m6.xlarge, taints: [{key: k, effect: Never}]}]",
            "nodeGroups[0].taints: effect \"Never\"",
        ),
    ];
    for (text, expected) in cases {
        let error = parse_groups(text, &catalog()).unwrap_err().to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

fn nodepool(yaml: &str) -> crate::api::NodePool {
    serde_yaml_ng::from_str(yaml).unwrap()
}

#[test]
fn groups_derived_from_nodepools_keep_their_labels_taints_limits_and_capacity_types() {
    let general = nodepool(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n  limits: {cpu: \"40\"}\n",
    );
    let gpu = nodepool(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gpu}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      taints: [{key: nvidia.com/gpu, value: \"true\", effect: NoSchedule}]\n      requirements:\n        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [g]}\n",
    );
    let mut training = Pod::simple("training", 3000, 12 * GIB);
    training.requests.set(ResourceName::NvidiaGpu, 1);
    training.tolerations.push(Toleration {
        key: "nvidia.com/gpu".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    let web = Pod::simple("web", 500, GIB);
    let agent = Pod::simple("agent", 100, GIB / 8);
    let (derived, notes) = derive_groups(&[general, gpu], &catalog(), &[web, training], &[agent]);
    assert!(notes.is_empty(), "{notes:?}");
    let names: Vec<&str> = derived.iter().map(|d| d.group.name.as_str()).collect();
    assert_eq!(
        names,
        ["general-spot", "general-on-demand", "gpu-on-demand"]
    );
    // The cheapest per vCPU of c and m within 4-16 vCPUs: c6 at $0.0425/vCPU-h.
    let spot = &derived[0].group;
    assert_eq!(spot.instance_type.name, "c6.xlarge");
    assert_eq!(spot.capacity_type, CapacityType::Spot);
    assert_eq!(spot.max_size, 10, "40 CPUs of 4-vCPU nodes");
    assert_eq!(spot.labels[labels::NODEPOOL], "general");
    assert!(
        derived[0].why.contains("max 10 from the pool's limits"),
        "{}",
        derived[0].why
    );
    // The GPU pool: on demand (v1's default), the GPU type, its taint, no limit.
    let g = &derived[2].group;
    assert_eq!(g.instance_type.name, "g5.xlarge");
    assert_eq!(
        g.taints,
        [Taint::new("nvidia.com/gpu", "true", "NoSchedule")]
    );
    assert_eq!(g.max_size, 1000);
    // A pool no type fits gets a note instead of a group.
    let (none, notes) = derive_groups(
        &[nodepool(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: tiny}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n        - {key: node.kubernetes.io/instance-type, operator: In, values: [m6.large]}\n",
        )],
        &catalog(),
        &[Pod::simple("small", 500, GIB)],
        &[Pod::simple("agent", 2000, GIB)],
    );
    assert!(none.is_empty());
    assert!(
        notes[0].contains("NodePool tiny: no on-demand instance type it allows takes its largest pod (500m CPU, 1024 MiB) with its DaemonSets"),
        "{notes:?}"
    );
}

fn scale_up_input<'a>(
    pending: &'a [Pod],
    groups: &'a [NodeGroup],
    sizes: &'a [usize],
    backed_off: &'a [bool],
    expander: Expander,
) -> ScaleUpInput<'a> {
    ScaleUpInput {
        pending,
        groups,
        sizes,
        backed_off,
        existing: Vec::new(),
        daemonsets: &[],
        expander,
        seed: 7,
    }
}

#[test]
fn scale_up_grows_the_group_the_expander_picks_by_the_nodes_its_packing_needs() {
    let pending = pods("web", 12, 1000, 2);
    let groups = [
        group("small", "m6.large", 100),
        group("big", "m6.2xlarge", 100),
    ];
    let least = scale_up(&scale_up_input(
        &pending,
        &groups,
        &[0, 0],
        &[false, false],
        Expander::LeastWaste,
    ));
    assert_eq!(least.options, 2);
    let chosen = least.chosen.unwrap();
    // 8-vCPU nodes take 7 such pods each (overhead), 2-vCPU nodes one: both place all 12.
    assert_eq!(chosen.pods, 12);
    let (small, big) = (
        scale_up(&scale_up_input(
            &pending,
            &groups[..1],
            &[0],
            &[false],
            Expander::MostPods,
        ))
        .chosen
        .unwrap(),
        scale_up(&scale_up_input(
            &pending,
            &groups[1..],
            &[0],
            &[false],
            Expander::MostPods,
        ))
        .chosen
        .unwrap(),
    );
    assert_eq!(small.claims.len(), 12);
    assert_eq!(big.claims.len(), 2);
    assert!(big.waste < small.waste, "{} {}", big.waste, small.waste);
    assert_eq!(chosen.group, 1, "least-waste takes the big nodes");
    // A group at its maximum, or backed off, is not an option; the pods say why.
    let none = scale_up(&scale_up_input(
        &pending,
        &groups,
        &[100, 0],
        &[false, true],
        Expander::Random,
    ));
    assert!(none.chosen.is_none());
    assert_eq!(none.helpless.len(), 12);
    assert!(
        none.helpless[0]
            .1
            .contains("small: at its maximum size 100")
            && none.helpless[0].1.contains("big: backed off"),
        "{:?}",
        none.helpless[0]
    );
    // The maximum caps the growth: 3 more nodes at most.
    let capped = scale_up(&scale_up_input(
        &pending,
        &groups[..1],
        &[97],
        &[false],
        Expander::Random,
    ));
    assert_eq!(capped.chosen.unwrap().claims.len(), 3);
}

#[test]
fn pods_that_fit_on_nodes_on_the_way_wait_for_them() {
    let pending = pods("web", 4, 1000, 2);
    let groups = [group("big", "m6.2xlarge", 10)];
    let instance = crate::ports::Instance {
        id: "i-1".into(),
        provider_id: "aws:///a/i-1".into(),
        instance_type: "m6.2xlarge".into(),
        zone: "a".into(),
        capacity_type: CapacityType::OnDemand,
        price: 0.4,
        image_id: "ami-1".into(),
        nodeclaim: "big-1".into(),
        nodepool: "big".into(),
        state: crate::ports::InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    };
    let mut input = scale_up_input(&pending, &groups, &[1], &[false], Expander::Random);
    input.existing = vec![Arc::new(upcoming_node(
        "node-1",
        &instance,
        &groups[0],
        &[],
    ))];
    let decided = scale_up(&input);
    assert_eq!(decided.waiting, 4);
    assert!(decided.chosen.is_none());
    // Twelve do not: five more wait for nothing, so a second node is asked for.
    let more = pods("web", 12, 1000, 2);
    input.pending = &more;
    let decided = scale_up(&input);
    assert_eq!(decided.waiting, 7, "{decided:?}");
    assert_eq!(
        decided.chosen.as_ref().map(|c| c.claims.len()),
        Some(1),
        "{decided:?}"
    );
}

#[test]
fn untolerated_taints_keep_a_group_from_helping() {
    let mut tainted = group("gpu", "g5.xlarge", 10);
    tainted
        .taints
        .push(Taint::new("nvidia.com/gpu", "true", "NoSchedule"));
    let pending = pods("web", 1, 500, 1);
    let decided = scale_up(&scale_up_input(
        &pending,
        std::slice::from_ref(&tainted),
        &[0],
        &[false],
        Expander::Random,
    ));
    assert!(decided.chosen.is_none());
    assert!(
        decided.helpless[0]
            .1
            .contains("taint nvidia.com/gpu=true:NoSchedule not tolerated"),
        "{:?}",
        decided.helpless
    );
}

/// A Ready node of group 0 named `name` with `pods` bound to it.
fn node(name: &str, pods: &[Pod]) -> NodeFacts {
    let it = &catalog()[2]; // m6.2xlarge
    let requested = pods
        .iter()
        .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
    NodeFacts {
        node: Arc::new(ExistingNode {
            name: name.into(),
            labels: [(labels::HOSTNAME.to_owned(), name.to_owned())].into(),
            taints: Vec::new(),
            allocatable: it.allocatable(),
            requested,
            pods: pods
                .iter()
                .map(|p| (p.namespace.clone(), p.labels.clone()))
                .collect(),
            anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            attach_limits: BTreeMap::new(),
            attached: Vec::new(),
        }),
        group: Some(0),
        pods: pods
            .iter()
            .map(|p| Candidate {
                pod: p.clone(),
                do_not_disrupt: false,
                pdbs: vec!["default/web".into()],
            })
            .collect(),
        ready: true,
        deleting: false,
    }
}

#[test]
fn underused_nodes_go_after_ten_minutes_when_their_pods_fit_elsewhere() {
    let settings = CasSettings::default();
    let groups = [group("big", "m6.2xlarge", 10)];
    let busy = pods("busy", 5, 1000, 2);
    let light = pods("light", 1, 1000, 2);
    let nodes = [
        node("n-busy", &busy),
        node("n-light", &light),
        node("n-empty", &[]),
    ];
    let pdbs: BTreeMap<String, i32> = [("default/web".to_owned(), 1)].into();
    let input = |now_ms, draining| ScaleDownInput {
        nodes: &nodes,
        groups: &groups,
        sizes: &[3],
        pdbs: &pdbs,
        daemonsets: &[],
        draining,
        cooling: false,
        now_ms,
    };
    let mut down = ScaleDown::default();
    assert!(down.scan(&input(0, 0), &settings).is_empty());
    assert_eq!(down.unneeded(), 2, "the light node and the empty one");
    assert!(down.scan(&input(9 * MINUTE_MS, 0), &settings).is_empty());
    // In a cool-down the time counts but nothing goes.
    let cooling = ScaleDownInput {
        cooling: true,
        ..input(11 * MINUTE_MS, 0)
    };
    let mut cooled = down.clone();
    assert!(cooled.scan(&cooling, &settings).is_empty());
    assert_eq!(cooled.unneeded(), 2);
    let removed = down.scan(&input(10 * MINUTE_MS, 0), &settings);
    let names: Vec<(&str, bool)> = removed.iter().map(|r| (r.node.as_str(), r.empty)).collect();
    assert_eq!(names, [("n-empty", true), ("n-light", false)]);
    // One drain at a time: with one under way, only the empty node goes.
    let mut down = ScaleDown::default();
    down.scan(&input(0, 1), &settings);
    let removed = down.scan(&input(10 * MINUTE_MS, 1), &settings);
    assert_eq!(removed.len(), 1);
    assert!(removed[0].empty);
}

#[test]
fn protected_pods_budgets_and_minimum_sizes_keep_nodes() {
    let settings = CasSettings::default();
    let mut groups = [group("big", "m6.2xlarge", 10)];
    let light = pods("light", 2, 1000, 2);
    let mut protected = node("n-protected", &light[..1]);
    protected.pods[0].do_not_disrupt = true;
    let nodes = [
        node("n-busy", &pods("busy", 5, 1000, 2)),
        protected,
        node("n-light", &light[1..]),
    ];
    let no_budget: BTreeMap<String, i32> = [("default/web".to_owned(), 0)].into();
    let scan = |groups: &[NodeGroup], pdbs: &BTreeMap<String, i32>| {
        let mut down = ScaleDown::default();
        down.scan(
            &ScaleDownInput {
                nodes: &nodes,
                groups,
                sizes: &[3],
                pdbs,
                daemonsets: &[],
                draining: 0,
                cooling: false,
                now_ms: 0,
            },
            &settings,
        );
        down.unneeded()
    };
    let budget: BTreeMap<String, i32> = [("default/web".to_owned(), 5)].into();
    assert_eq!(scan(&groups, &budget), 1, "only the unprotected light node");
    assert_eq!(scan(&groups, &no_budget), 0, "its PDB allows no eviction");
    groups[0].min_size = 3;
    assert_eq!(scan(&groups, &budget), 0, "the group is at its minimum");
}

#[test]
fn expanders_parse_by_their_flag_names() {
    assert_eq!(
        "least-waste".parse::<Expander>().unwrap(),
        Expander::LeastWaste
    );
    assert_eq!("random".parse::<Expander>().unwrap(), Expander::Random);
    assert!(
        "price"
            .parse::<Expander>()
            .unwrap_err()
            .to_string()
            .contains("random or least-waste or most-pods")
    );
}
