//! One round's basics: packing onto the cheapest types, existing nodes first, taints, pool
//! weights and limits, node selectors and affinity terms, daemonset overhead, exotic types,
//! what cannot be modelled, host ports and volumes.

use super::*;

#[test]
fn packs_pods_onto_one_claim_that_keeps_every_fitting_type_cheapest_first() {
    let result = solve(&input(pods("p", 3, 1000, 1), vec![pool("default")]));
    assert_all_placed(&result);
    assert_eq!(result.new_claims.len(), 1);
    let claim = &result.new_claims[0];
    assert_eq!(claim.pods.len(), 3);
    // 3 CPUs plus overhead: m.large (2 vCPU) is out; the GPU type is exotic.
    assert_eq!(
        first_types(claim, 3),
        vec!["c.xlarge", "m.xlarge", "m.2xlarge"]
    );
    assert_eq!(claim.instance_types[0].capacity_type, CapacityType::Spot);
    assert_eq!(claim.requests.get(ResourceName::Pods), 3);
}

#[test]
fn existing_nodes_with_room_are_filled_first() {
    let mut round = input(pods("p", 2, 1000, 1), vec![pool("default")]);
    round.existing.push(std::sync::Arc::new(ExistingNode {
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        name: "node-1".into(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(1500, 4 * GIB).with(ResourceName::Pods, 10),
        requested: Resources::ZERO,
        pods: Vec::new(),
    }));
    let result = solve(&round);
    assert_eq!(
        result.bindings,
        vec![Binding {
            pod: "p-000".into(),
            node: "node-1".into()
        }]
    );
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec!["p-001".to_owned()]);
}

#[test]
fn taints_need_tolerations_and_the_reason_names_the_taint() {
    let mut tainted = pool("gpu");
    tainted.taints = vec![Taint::new("nvidia.com/gpu", "true", "NoSchedule")];
    let result = solve(&input(pods("p", 1, 100, 1), vec![tainted.clone()]));
    assert_eq!(
        result.unschedulable[0].reason,
        "nodepool \"gpu\": untolerated taint nvidia.com/gpu=true:NoSchedule"
    );
    let mut tolerant = pods("p", 1, 100, 1);
    tolerant[0].tolerations.push(Toleration {
        key: "nvidia.com/gpu".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    assert_eq!(solve(&input(tolerant, vec![tainted])).new_claims.len(), 1);
}

#[test]
fn heavier_nodepools_are_tried_first() {
    let mut critical = pool("critical");
    critical.weight = 50;
    critical
        .requirements
        .add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
    let result = solve(&input(
        pods("p", 1, 100, 1),
        vec![pool("default"), critical],
    ));
    assert_eq!(result.new_claims[0].nodepool, "critical");
    assert_eq!(
        result.new_claims[0].instance_types[0].capacity_type,
        CapacityType::OnDemand
    );
}

#[test]
fn limits_are_pessimistic_and_fall_through_to_the_next_pool() {
    let mut small = pool("small");
    small.weight = 10;
    small.limits.resources.insert(ResourceName::Cpu, 8000);
    // Each claim reserves the largest capacity among its options (8 vCPU), so the second
    // claim of 7 vCPU pods must go to the next pool.
    let result = solve(&input(
        pods("p", 2, 7000, 1),
        vec![small.clone(), pool("default")],
    ));
    let pools: Vec<&str> = result
        .new_claims
        .iter()
        .map(|c| c.nodepool.as_str())
        .collect();
    assert_eq!(pools, vec!["small", "default"]);
    let result = solve(&input(pods("p", 2, 7000, 1), vec![small]));
    assert_eq!(result.unschedulable.len(), 1);
    assert_eq!(
        result.unschedulable[0].reason,
        "nodepool \"small\": would exceed the NodePool's limits"
    );
}

#[test]
fn node_limit_counts_existing_nodes() {
    let mut capped = pool("capped");
    capped.limits.nodes = Some(3);
    capped.node_count = 3;
    let result = solve(&input(pods("p", 1, 100, 1), vec![capped]));
    assert_eq!(
        result.unschedulable[0].reason,
        "nodepool \"capped\": limit of 3 nodes reached"
    );
}

#[test]
fn selectors_on_labels_the_pool_does_not_define_are_unschedulable() {
    let mut team_pool = pool("team-a");
    team_pool
        .requirements
        .add("team", Requirement::is_in(["a"]));
    let mut wants_b = pods("p", 1, 100, 1);
    wants_b[0]
        .node_selector
        .add("team", Requirement::is_in(["b"]));
    let mut wants_other = pods("q", 1, 100, 1);
    wants_other[0]
        .node_selector
        .add("other", Requirement::is_in(["x"]));
    let result = solve(&input([wants_b, wants_other].concat(), vec![team_pool]));
    let reasons: Vec<&str> = result
        .unschedulable
        .iter()
        .map(|u| u.reason.as_str())
        .collect();
    assert_eq!(
        reasons,
        vec![
            "nodepool \"team-a\": requirement team In [b] conflicts with the NodePool's In [a]",
            "nodepool \"team-a\": requirement other In [x] conflicts with the NodePool's no such label on nodes of this NodePool",
        ]
    );
}

#[test]
fn affinity_terms_are_alternatives_and_narrow_the_claim() {
    let mut p = pods("p", 1, 100, 1);
    let mut spot_in_a = Requirements::new();
    spot_in_a.add(labels::CAPACITY_TYPE, Requirement::is_in(["spot"]));
    spot_in_a.add(labels::ZONE, Requirement::is_in(["a"]));
    let mut impossible = Requirements::new();
    impossible.add(labels::ZONE, Requirement::is_in(["z"]));
    p[0].affinity_terms = vec![impossible, spot_in_a];
    let result = solve(&input(p, vec![pool("default")]));
    let option = &result.new_claims[0].instance_types[0];
    assert_eq!(
        (&*option.zone, option.capacity_type),
        ("a", CapacityType::Spot)
    );
}

#[test]
fn daemonset_overhead_is_added_where_the_daemonset_runs() {
    let ds = Pod::simple("ds", 1500, GIB);
    let mut tainted = pool("tainted");
    tainted.taints = vec![Taint::new("dedicated", "x", "NoSchedule")];
    let mut p = pods("p", 1, 1000, 1);
    p[0].tolerations.push(Toleration {
        key: "dedicated".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    let mut round = input(p.clone(), vec![pool("default")]);
    round.daemonsets = vec![ds.clone()];
    let with_ds = solve(&round);
    assert_eq!(with_ds.new_claims[0].requests.get(ResourceName::Cpu), 2500);
    assert_eq!(first_types(&with_ds.new_claims[0], 1), vec!["c.xlarge"]);
    let mut round = input(p, vec![tainted]);
    round.daemonsets = vec![ds];
    let without = solve(&round);
    assert_eq!(
        without.new_claims[0].requests.get(ResourceName::Cpu),
        1000,
        "the daemonset does not tolerate the pool"
    );
}

fn port(port: i32) -> crate::model::pod::HostPort {
    crate::model::pod::HostPort {
        ip: "0.0.0.0".into(),
        protocol: "TCP".into(),
        port,
    }
}

#[test]
fn a_daemonset_host_port_keeps_pods_that_need_it_off_new_nodes() {
    let mut ds = Pod::simple("ds", 100, GIB / 4);
    ds.host_ports = vec![port(8080)];
    let mut same = Pod::simple("same-port", 500, GIB);
    same.host_ports = vec![port(8080)];
    let mut other = Pod::simple("other-port", 500, GIB);
    other.host_ports = vec![port(9090)];
    let mut round = input(vec![same, other], vec![pool("default")]);
    round.daemonsets = vec![ds.clone()];
    let result = solve(&round);
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].pods, vec!["other-port".to_owned()]);
    assert_eq!(result.unschedulable.len(), 1);
    let reason = &result.unschedulable[0].reason;
    assert!(reason.contains("host port 8080/TCP"), "{reason}");
    // A pool whose taints the daemonset does not tolerate has the port free.
    let mut tainted = pool("tainted");
    tainted.taints = vec![Taint::new("dedicated", "x", "NoSchedule")];
    let mut same = Pod::simple("same-port", 500, GIB);
    same.host_ports = vec![port(8080)];
    same.tolerations.push(Toleration {
        key: "dedicated".into(),
        exists: true,
        value: String::new(),
        effect: String::new(),
    });
    let mut round = input(vec![same], vec![pool("default"), tainted]);
    round.daemonsets = vec![ds];
    let result = solve(&round);
    assert_all_placed(&result);
    assert_eq!(result.new_claims[0].nodepool, "tainted");
}

#[test]
fn a_pod_selecting_a_restricted_label_is_left_out_and_the_others_are_served() {
    let kube = |name: &str, spec: serde_json::Value| {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": spec,
        }))
        .unwrap();
        Pod::try_from(&pod).unwrap()
    };
    let pinned = kube(
        "pinned",
        serde_json::json!({"containers": [], "nodeSelector": {"kubernetes.io/hostname": "red-node"}}),
    );
    let internal = kube(
        "internal",
        serde_json::json!({"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/registered", "operator": "Exists"}]}
        ]}}}}),
    );
    // The hostname requirement a round adds to keep a pod off a node that refused it is not
    // the pod's own: it is planned.
    let mut refused = Pod::simple("refused", 500, GIB);
    refused
        .node_selector
        .add(labels::HOSTNAME, Requirement::not_in(["node-1"]));
    let mut pods = pods("p", 1, 500, 1);
    pods.push(refused);
    pods.extend([pinned, internal]);
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(
        result.new_claims[0].pods,
        vec!["p-000".to_owned(), "refused".to_owned()]
    );

    let reasons: BTreeMap<&str, &str> = result
        .unschedulable
        .iter()
        .map(|u| (u.pod.as_str(), u.reason.as_str()))
        .collect();
    assert!(
        reasons["pinned"].starts_with("label \"kubernetes.io/hostname\" is restricted"),
        "{reasons:?}"
    );
    assert!(
        reasons["internal"].starts_with("label domain \"karpenter.sh\" is restricted"),
        "{reasons:?}"
    );
}

/// An arm64 instance type with `cpu` vCPUs and `mem` GiB.
fn arm(name: &str, cpu: i64, mem: i64, price: f64) -> Arc<InstanceType> {
    let mut t = (*it(name, cpu, mem, price)).clone();
    t.labels.insert(labels::ARCH.into(), "arm64".into());
    Arc::new(InstanceType::new(
        name,
        t.labels.clone(),
        t.capacity,
        t.overhead,
        t.offerings.clone(),
    ))
}

#[test]
fn daemonset_overhead_counts_only_on_the_instance_types_it_runs_on() {
    let mut nowhere = Pod::simple("ds-nowhere", 2000, GIB);
    nowhere
        .node_selector
        .add(labels::INSTANCE_TYPE, Requirement::is_in(["no-such-type"]));
    let mut arm_only = Pod::simple("ds-arm", 2000, GIB);
    arm_only
        .node_selector
        .add(labels::ARCH, Requirement::is_in(["arm64"]));
    let mut mixed = pool("default");
    mixed.instance_types.push(arm("a.2xlarge", 8, 16, 0.15));
    let mut round = input(pods("p", 1, 1000, 1), vec![mixed.clone()]);
    round.daemonsets = vec![nowhere.clone(), arm_only.clone()];
    let result = solve(&round);
    assert_all_placed(&result);
    let claim = &result.new_claims[0];
    assert_eq!(first_types(claim, 1), vec!["m.large"]);
    assert_eq!(claim.requests.get(ResourceName::Cpu), 1000);
    // A pod that needs arm64 carries the arm64 daemonset on its node.
    let mut wants_arm = Pod::simple("wants-arm", 1000, GIB);
    wants_arm
        .node_selector
        .add(labels::ARCH, Requirement::is_in(["arm64"]));
    let mut round = input(vec![wants_arm], vec![mixed]);
    round.daemonsets = vec![nowhere, arm_only];
    let result = solve(&round);
    assert_all_placed(&result);
    let claim = &result.new_claims[0];
    assert_eq!(first_types(claim, 1), vec!["a.2xlarge"]);
    assert_eq!(claim.requests.get(ResourceName::Cpu), 3000);
}

#[test]
fn gpu_types_only_for_pods_that_ask_for_gpus() {
    let mut wants_gpu = Pod::simple("gpu-pod", 1000, GIB);
    wants_gpu.requests.set(ResourceName::NvidiaGpu, 1);
    let result = solve(&input(
        vec![wants_gpu, Pod::simple("cpu-pod", 3500, GIB)],
        vec![pool("default")],
    ));
    let by_pod: BTreeMap<&str, Vec<&str>> = result
        .new_claims
        .iter()
        .map(|c| {
            (
                c.pods[0].as_str(),
                c.instance_types.iter().map(|o| &*o.name).collect(),
            )
        })
        .collect();
    assert_eq!(by_pod["gpu-pod"], vec!["g.xlarge"]);
    assert!(!by_pod["cpu-pod"].contains(&"g.xlarge"));
}

#[test]
fn unsupported_constraints_and_unknown_resources_are_named() {
    let mut spread = Pod::simple("spread", 100, GIB);
    spread
        .unsupported
        .push("topology spread constraints".into());
    let mut dongle = Pod::simple("dongle", 100, GIB);
    dongle.unknown_resources.push("example.com/dongle".into());
    let result = solve(&input(vec![spread, dongle], vec![pool("default")]));
    let reasons: BTreeMap<&str, &str> = result
        .unschedulable
        .iter()
        .map(|u| (u.pod.as_str(), u.reason.as_str()))
        .collect();
    assert_eq!(
        reasons["spread"],
        "uses constraints this scheduler does not model yet: topology spread constraints"
    );
    assert_eq!(
        reasons["dongle"],
        "requests resources no instance type provides: example.com/dongle"
    );
}

#[test]
fn too_big_pods_say_what_is_short() {
    let result = solve(&input(pods("huge", 1, 64_000, 1), vec![pool("default")]));
    assert!(
        result.unschedulable[0].reason.ends_with("insufficient cpu"),
        "{}",
        result.unschedulable[0].reason
    );
}

/// Every offering out of capacity (insufficient-capacity errors mark them unavailable for a
/// few minutes): the pods wait, and the reason says it is capacity, not their requirements.
#[test]
fn pods_waiting_for_capacity_say_so() {
    let mut exhausted = pool("default");
    exhausted.instance_types = catalog()
        .into_iter()
        .map(|it| {
            let mut it = (*it).clone();
            for o in &mut it.offerings {
                o.available = false;
            }
            Arc::new(it)
        })
        .collect();
    let offerings: usize = exhausted
        .instance_types
        .iter()
        .map(|it| it.offerings.len())
        .sum();
    let result = solve(&input(pods("web", 2, 500, 1), vec![exhausted.clone()]));
    assert_eq!(result.unschedulable.len(), 2);
    let reason = &result.unschedulable[0].reason;
    assert!(
        reason.contains("unavailable for now after insufficient capacity"),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("the {offerings} offering(s)")),
        "{reason}"
    );

    // With one type left, they launch on it.
    let mut one_left = exhausted;
    let mut it = (*one_left.instance_types[0]).clone();
    it.offerings[0].available = true;
    one_left.instance_types[0] = Arc::new(it);
    assert_all_placed(&solve(&input(pods("web", 2, 500, 1), vec![one_left])));

    // Requirements nothing offers are not a capacity problem.
    let elsewhere = zone_pool("default", &["nowhere-1a"]);
    let result = solve(&input(pods("web", 1, 500, 1), vec![elsewhere]));
    let reason = &result.unschedulable[0].reason;
    assert!(!reason.contains("unavailable for now"), "{reason}");
}

#[test]
fn min_values_keeps_enough_distinct_values() {
    let mut diverse = pool("diverse");
    let mut families = Requirement::exists();
    families.min_values = Some(3);
    diverse
        .requirements
        .add("karpenter.k8s.aws/instance-family", families);
    // 3 CPUs leave m.xlarge, m.2xlarge and c.xlarge: families m and c only.
    let result = solve(&input(pods("p", 1, 3000, 1), vec![diverse]));
    assert!(
        result.unschedulable[0]
            .reason
            .contains("minValues 3 for karpenter.k8s.aws/instance-family not met")
    );
}

#[test]
fn pods_binding_the_same_host_port_never_share_a_node() {
    let mut round = input(
        [
            binding_port("tcp", 3, 8080, "TCP", "0.0.0.0"),
            binding_port("udp", 1, 8080, "UDP", "0.0.0.0"),
            binding_port("ip", 1, 8080, "TCP", "10.0.0.1"),
        ]
        .concat(),
        vec![pool("default")],
    );
    let mut node = roomy_node("node-with-8080", "a");
    node.host_ports = vec![crate::model::pod::HostPort {
        ip: "0.0.0.0".into(),
        protocol: "TCP".into(),
        port: 8080,
    }];
    round.existing.push(std::sync::Arc::new(node));
    let result = solve(&round);
    assert_all_placed(&result);
    // Only the UDP pod may join the node already binding TCP 8080.
    assert_eq!(result.bindings.len(), 1);
    assert!(result.bindings[0].pod.starts_with("udp"));
    // Three TCP pods and the one on a specific address all conflict with each other.
    assert_eq!(result.new_claims.len(), 4);
    for claim in &result.new_claims {
        assert_eq!(claim.pods.len(), 1, "{:?}", claim.pods);
    }
}

#[test]
fn volumes_pin_pods_to_their_topology_and_blocked_pods_say_why() {
    let mut zone_b = Requirements::new();
    zone_b.add(labels::ZONE, Requirement::is_in(["b"]));
    let mut stateful = pods("db", 2, 500, 1);
    stateful[0].volume_requirements = vec![zone_b];
    stateful[1].blocked = Some("persistentvolumeclaim db/data-1 not found".into());
    let result = solve(&input(stateful, vec![pool("default")]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(zone_of(&result.new_claims[0]), "b");
    assert_eq!(result.unschedulable.len(), 1);
    assert_eq!(
        result.unschedulable[0].reason,
        "persistentvolumeclaim db/data-1 not found"
    );
    // Volumes in zone b bind zone-spread pods there. Zone a, where they cannot go, is no
    // domain until a node exists there; then it counts (a volume does not narrow which
    // nodes a spread counts, as in kube-scheduler) and, holding none, lets b take one.
    let mut zone_b = Requirements::new();
    zone_b.add(labels::ZONE, Requirement::is_in(["b"]));
    let mut spread_pods = web(2, labels::ZONE, false);
    for p in &mut spread_pods {
        p.volume_requirements = vec![zone_b.clone()];
    }
    let mut round = input(spread_pods, vec![pool("default")]);
    assert_eq!(placed_pods(&solve(&round)), 2);
    round
        .existing
        .push(std::sync::Arc::new(empty_node("node-a", "a")));
    assert_eq!(placed_pods(&solve(&round)), 1);
}

#[test]
fn existing_nodes_take_no_more_volumes_than_their_driver_attaches() {
    use crate::model::volumes::VolumeAttachment;
    let ebs = |volume: &str| VolumeAttachment {
        driver: "ebs.csi.aws.com".into(),
        volume: volume.into(),
    };
    let mut with_volumes = pods("db", 3, 100, 1);
    with_volumes[0].volume_attachments = vec![ebs("vol-1")];
    with_volumes[1].volume_attachments = vec![ebs("vol-2")];
    // Shares vol-0 with the pod already on the node: no new attachment.
    with_volumes[2].volume_attachments = vec![ebs("vol-0")];
    let mut round = input(with_volumes, vec![pool("default")]);
    let mut node = roomy_node("node-a", "a");
    node.attach_limits = [("ebs.csi.aws.com".to_owned(), 2)].into();
    node.attached = vec![ebs("vol-0")];
    round.existing.push(std::sync::Arc::new(node));
    let result = solve(&round);
    assert_all_placed(&result);
    // The node holds vol-0 and takes one more volume; the third pod shares vol-0.
    let bound: BTreeSet<&str> = result.bindings.iter().map(|b| b.pod.as_str()).collect();
    assert_eq!(bound.len(), 2, "{bound:?}");
    assert!(bound.contains("db-002"));
    assert_eq!(placed_pods(&result), 3);
}

#[test]
fn policies_parse_by_name_and_name_the_choices_otherwise() {
    assert_eq!("ignore".parse(), Ok(PreferencePolicy::Ignore));
    assert_eq!("BestEffort".parse(), Ok(MinValuesPolicy::BestEffort));
    assert_eq!(
        "Loose"
            .parse::<MinValuesPolicy>()
            .map_err(|e| e.to_string()),
        Err("unknown minValues policy \"Loose\"; use Strict or BestEffort".to_owned())
    );
}
