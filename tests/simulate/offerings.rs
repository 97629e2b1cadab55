//! What instances are offered at and bought as: regional prices, NodeOverlay prices and
//! capacity reservations, each on a whole simulated run.

use super::*;

/// The committed price table's USD/hour for `name` in `region`.
fn listed_price(region: &str, name: &str) -> f64 {
    let table = include_str!("../../core/data/aws/on-demand-prices.csv");
    table
        .lines()
        .find_map(|line| {
            let mut cells = line.split(',');
            (cells.next() == Some(region) && cells.next() == Some(name))
                .then(|| cells.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("{region} {name} is in the table"))
}

#[test]
fn a_run_in_eu_west_1_buys_at_eu_west_1_prices() {
    let types = ["m5.large", "c6i.xlarge", "r5.large"];
    let mut manifests = SMALL.split("daemonsets:").next().unwrap().replace(
        "name: small\nduration: 30m",
        "name: eu\nduration: 10m\nregion: eu-west-1",
    );
    manifests = manifests.replace(
        "values: [spot, on-demand]",
        "values: [on-demand]}\n          - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c6i.xlarge, r5.large]",
    );
    let mut yaml = format!("{manifests}deployments:\n");
    for (i, name) in types.iter().enumerate() {
        yaml.push_str(&format!(
            "  - {{name: w{i}, cpu: 500m, memory: 1Gi, replicas: 1, nodeSelector: {{node.kubernetes.io/instance-type: {name}}}}}\n"
        ));
    }
    let scenario = parse(&yaml, "eu").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-eu-west-1")).unwrap();
    assert_eq!(report.pods_bound, 3, "{report:#?}");
    for name in types {
        let group = report
            .nodes
            .iter()
            .find(|g| g.instance_type == name)
            .unwrap_or_else(|| panic!("a {name} node: {:?}", report.nodes));
        let price = group.cost_per_hour / group.count as f64;
        assert!(
            (price - listed_price("eu-west-1", name)).abs() < 1e-9,
            "{name} ${price}/h"
        );
        assert!(
            price > listed_price("us-east-1", name),
            "{name} costs more than in us-east-1"
        );
    }
    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    assert!(
        view.live_nodeclaims().all(|(_, c)| c
            .instance
            .as_ref()
            .is_some_and(|i| i.zone.starts_with("eu-west-1"))),
        "every node is in an eu-west-1 zone"
    );
}

/// A scenario buying on-demand c6i or m6i for 1-CPU pods: c6i is cheaper at list prices.
const FAMILIES: &str = r#"
name: families
duration: 10m
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: r
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {k: v}}]
    securityGroupSelectorTerms: [{tags: {k: v}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: default}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i, m6i]}
          - {key: karpenter.k8s.aws/instance-size, operator: In, values: [large, xlarge, 2xlarge]}
deployments:
  - {name: web, cpu: "1", memory: 1Gi, replicas: 8}
"#;

/// A NodeOverlay taking 30 % off m6i (say, a negotiated discount).
const M6I_DISCOUNT: &str = r#"  ---
  apiVersion: karpenter.sh/v1alpha1
  kind: NodeOverlay
  metadata: {name: m6i-discount}
  spec:
    requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
    priceAdjustment: "-30%"
deployments:"#;

fn families(report: &karpenter_rs::sim::run::Report) -> BTreeSet<String> {
    (report.nodes.iter())
        .map(|g| g.instance_type.split('.').next().unwrap().to_owned())
        .collect()
}

/// `karpenter` with `args`, which must succeed; its standard output.
pub(crate) fn karpenter(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("FEATURE_GATES")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "karpenter {args:?}: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

/// Upstream's NodeOverlay (feature gate `NodeOverlay`): a -30 % overlay on m6i makes the
/// solver buy m6i where list prices pick c6i; the launch is priced and explained by the
/// overlay, the report counts what the overlay says is paid, `journal verify` reproduces the
/// rounds, `journal whatif` shows the run without and with the overlay, and overlays are
/// refused while the gate is off.
#[test]
fn a_node_overlay_discount_makes_the_solver_choose_its_family() {
    let plain = parse(FAMILIES, "families").unwrap();
    let recorded = tempfile::tempdir().unwrap();
    let before = run(&plain, &options(recorded.path(), "e2e-overlay-before")).unwrap();
    assert_eq!(before.pods_bound, 8, "{before:#?}");
    assert_eq!(families(&before), BTreeSet::from(["c6i".to_owned()]));

    let text = FAMILIES.replace("deployments:", M6I_DISCOUNT);
    let overlaid = parse(&text, "families+overlay").unwrap();
    assert_eq!(overlaid.overlays.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let refused = run(&overlaid, &options(dir.path(), "e2e-overlay-gate-off")).unwrap_err();
    assert!(
        refused.to_string().contains("NodeOverlay=true"),
        "{refused:#}"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut gated = options(dir.path(), "e2e-overlay-after");
    gated.settings.node_overlay = true;
    let after = run(&overlaid, &gated).unwrap();
    assert_eq!(after.pods_bound, 8, "{after:#?}");
    assert_eq!(families(&after), BTreeSet::from(["m6i".to_owned()]));
    for group in &after.nodes {
        let list = listed_price("us-east-1", &group.instance_type);
        let paid = group.cost_per_hour / group.count as f64;
        assert!((paid - list * 0.7).abs() < 1e-9, "{group:?} at {list} list");
    }
    assert!(after.cost_per_hour < before.cost_per_hour, "{after:?}");
    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let claim = journal
        .read_from(0)
        .find_map(|e| match e.unwrap().event {
            DomainEvent::NodeClaimLaunched { nodeclaim, .. } => Some(nodeclaim),
            _ => None,
        })
        .unwrap();
    let karpenter_rs::explain::Explanation::Found { text: why, .. } =
        karpenter_rs::explain::nodeclaim(&journal, &claim).unwrap()
    else {
        panic!("{claim} is explained");
    };
    assert!(
        why.contains("(NodeOverlay m6i-discount; without it $")
            && why.contains("the on-demand price from the embedded price table (us-east-1)"),
        "{why}"
    );
    drop(journal);
    let verified = karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(
        verified.contains("round(s) reproduced, 0 different"),
        "{verified}"
    );

    // The recorded run replayed under the overlay's manifests, side by side.
    let manifests = dir.path().join("overlay.yaml");
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    std::fs::write(&manifests, yaml["manifests"].as_str().unwrap()).unwrap();
    let json = karpenter(&[
        "journal",
        "whatif",
        recorded.path().to_str().unwrap(),
        "--manifests",
        manifests.to_str().unwrap(),
        "--feature-gates",
        "NodeOverlay=true",
        "--json",
    ]);
    let both: serde_json::Value = serde_json::from_str(&json).unwrap();
    let end = |run: &str| both[run]["end_cost_per_hour"].as_f64().unwrap();
    assert!(
        (end("recorded") - before.cost_per_hour).abs() < 1e-9,
        "{json}"
    );
    assert!((end("whatif") - after.cost_per_hour).abs() < 1e-9, "{json}");
}

/// An overlay adding 2 × `smarter-devices/fuse` to m6i (say, a device plugin its AMI runs).
const FUSE_ON_M6I: &str = r#"  ---
  apiVersion: karpenter.sh/v1alpha1
  kind: NodeOverlay
  metadata: {name: fuse}
  spec:
    requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}
    capacity:
      smarter-devices/fuse: "2"
deployments:
  - {name: fuse-users, cpu: 500m, memory: 512Mi, replicas: 3, resources: {smarter-devices/fuse: "1"}}"#;

/// Upstream's NodeOverlay `capacity`: pods asking for an extended resource no instance type
/// has stay pending; with an overlay adding it to m6i they run on m6i nodes (no more of them
/// per node than the overlay's amount), and the recorded rounds reproduce in another process (the journal carries the resource by name).
#[test]
fn a_node_overlay_adding_an_extended_resource_makes_its_pods_schedulable() {
    let text = FAMILIES.replace("deployments:", FUSE_ON_M6I);
    let scenario = parse(&text, "families+fuse").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut without = options(dir.path(), "e2e-overlay-capacity-off");
    without.settings.node_overlay = true;
    let mut no_overlay = scenario.clone();
    no_overlay.overlays.clear();
    let before = run(&no_overlay, &without).unwrap();
    assert_eq!(
        (before.pods_bound, before.pods_pending),
        (8, 3),
        "{before:#?}"
    );
    assert!(
        before
            .unschedulable
            .values()
            .any(|why| why.contains("smarter-devices/fuse")),
        "{:?}",
        before.unschedulable
    );

    let dir = tempfile::tempdir().unwrap();
    let mut gated = options(dir.path(), "e2e-overlay-capacity");
    gated.settings.node_overlay = true;
    let after = run(&scenario, &gated).unwrap();
    assert_eq!(
        (after.pods_bound, after.pods_pending),
        (11, 0),
        "{after:#?}"
    );
    let m6i: usize = (after.nodes.iter())
        .filter(|g| g.instance_type.starts_with("m6i."))
        .map(|g| g.count)
        .sum();
    assert!(m6i >= 2, "3 fuse pods, 2 per node: {:?}", after.nodes);
    let verified = karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(
        verified.contains("round(s) reproduced, 0 different"),
        "{verified}"
    );
}

/// The reservation scenario: 10 × c6i.2xlarge reserved, 20 pods of 3 CPU that fit in it,
/// then 24.
const RESERVATIONS: &str = include_str!("../../deploy/scenarios/reservations.yaml");

#[test]
fn a_capacity_reservation_is_filled_before_anything_is_bought_and_cuts_the_bill() {
    let scenario = parse(RESERVATIONS, "reservations").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let with = run(&scenario, &options(dir.path(), "e2e-reserved")).unwrap();
    assert_eq!(with.pods_bound, 24, "{with:#?}");
    let reserved: Vec<_> = (with.nodes.iter())
        .filter(|g| g.capacity_type == "reserved")
        .collect();
    assert_eq!(reserved.len(), 1, "{with:#?}");
    assert_eq!(
        (reserved[0].instance_type.as_str(), reserved[0].count),
        ("c6i.2xlarge", 10),
        "every reserved instance in use: {with:#?}"
    );
    // The 4 pods past the reservation are bought on-demand, after one round's wait.
    let bought: usize = (with.nodes.iter())
        .filter(|g| g.capacity_type == "on-demand")
        .map(|g| g.count)
        .sum();
    assert!(bought >= 1, "{with:#?}");
    // A round from scratch for the same pods finds the reservation the fleet fills.
    let scratch = with.from_scratch.clone().unwrap();
    assert!(
        scratch.cost_per_hour > 0.0 && scratch.cost_per_hour <= with.cost_per_hour + 1e-9,
        "{scratch:?} against {}",
        with.cost_per_hour
    );

    let off = tempfile::tempdir().unwrap();
    let mut gate_off = options(off.path(), "e2e-reserved-off");
    gate_off.settings.reserved_capacity = false;
    let without = run(&scenario, &gate_off).unwrap();
    assert_eq!(without.pods_bound, 24, "{without:#?}");
    assert!(without.nodes.iter().all(|g| g.capacity_type != "reserved"));
    assert!(
        with.cost_per_hour < without.cost_per_hour / 2.0,
        "{} with the reservation, {} without",
        with.cost_per_hour,
        without.cost_per_hour
    );

    // Each reserved node's explanation names its reservation.
    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let claims: Vec<String> = (journal.read_from(0))
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance,
            } if instance.reservation.is_some() => Some(nodeclaim),
            _ => None,
        })
        .collect();
    assert_eq!(claims.len(), 10);
    for claim in &claims {
        let karpenter_rs::explain::Explanation::Found { text: why, .. } =
            karpenter_rs::explain::nodeclaim(&journal, claim).unwrap()
        else {
            panic!("{claim} is explained");
        };
        assert!(
            why.contains("in capacity reservation cr-0a1b2c3d4e5f60718, type default"),
            "{why}"
        );
    }
    drop(journal);
    let verified = karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");

    // The same run replayed without reservations, side by side.
    let manifests = dir.path().join("same.yaml");
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(RESERVATIONS).unwrap();
    std::fs::write(&manifests, yaml["manifests"].as_str().unwrap()).unwrap();
    let json = karpenter(&[
        "journal",
        "whatif",
        dir.path().to_str().unwrap(),
        "--manifests",
        manifests.to_str().unwrap(),
        "--feature-gates",
        "ReservedCapacity=false",
        "--json",
    ]);
    let both: serde_json::Value = serde_json::from_str(&json).unwrap();
    let end = |run: &str| both[run]["end_cost_per_hour"].as_f64().unwrap();
    assert!(end("recorded") < end("whatif") / 2.0, "{json}");
}

#[test]
fn a_badly_shaped_or_unknown_reservation_is_refused_naming_the_field() {
    let cases = [
        (
            "id: cr-0a1b2c3d4e5f60718",
            "id: CR-12",
            "reservations[0].id: \"CR-12\" is not a capacity reservation id",
        ),
        (
            "instanceType: c6i.2xlarge",
            "instanceType: c6i.huge",
            "reservations[0].instanceType: \"c6i.huge\"",
        ),
        (
            "zone: us-east-1a",
            "zone: eu-west-1a",
            "reservations[0].zone:",
        ),
        ("count: 10", "count: 0", "reservations[0].count:"),
    ];
    for (from, to, expected) in cases {
        let text = RESERVATIONS.replace(from, to);
        let error = parse(&text, "bad").unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{to}: {error:#}");
    }
}

/// A Capacity Block of 4 × c6i.2xlarge ending 60 minutes in: its nodes take the workload
/// first, and are drained and replaced when it starts expiring (40 minutes before its end,
/// as upstream's expiration controller deletes such NodeClaims), before EC2 takes them back.
const CAPACITY_BLOCK: &str = r#"
name: capacity-block
duration: 45m
reservations:
  - {id: cr-0b10c4000000000001, instanceType: c6i.2xlarge, zone: us-east-1a, count: 4, type: capacity-block, endsAfter: 60m}
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: r
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {k: v}}]
    securityGroupSelectorTerms: [{tags: {k: v}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: default}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}
          - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c6i]}
deployments:
  - {name: train, cpu: "3", memory: 4Gi, replicas: 8}
"#;

#[test]
fn nodes_on_an_expiring_capacity_block_are_drained_and_replaced_before_it_ends() {
    let scenario = parse(CAPACITY_BLOCK, "capacity-block").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-capacity-block")).unwrap();
    assert_eq!(report.pods_bound, 8, "{report:#?}");
    assert!(
        report.nodes.iter().all(|g| g.capacity_type == "on-demand"),
        "{report:#?}"
    );
    assert_eq!(report.interruptions.received, 4, "{report:#?}");
    assert_eq!(report.leaked_instances, 0);
    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let mut blocked = Vec::new();
    let mut expiring = 0;
    let mut first_ms = None;
    for envelope in journal.read_from(0) {
        let envelope = envelope.unwrap();
        let first_ms = *first_ms.get_or_insert(envelope.recorded_at_ms);
        match envelope.event {
            DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance,
            } if instance.reservation.is_some() => {
                assert_eq!(expiring, 0, "nothing launches into an expiring block");
                blocked.push(nodeclaim);
            }
            DomainEvent::InterruptionReceived { kind, .. } => {
                // 40 minutes before the end at 60m.
                assert_eq!(envelope.recorded_at_ms - first_ms, 20 * 60 * 1000);
                assert_eq!(
                    kind,
                    karpenter_core::ports::InterruptionKind::CapacityBlockExpiring
                );
                expiring += 1;
            }
            _ => {}
        }
    }
    assert_eq!((blocked.len(), expiring), (4, 4));
    let claim = &blocked[0];
    let karpenter_rs::explain::Explanation::Found { text: why, .. } =
        karpenter_rs::explain::nodeclaim(&journal, claim).unwrap()
    else {
        panic!("{claim} is explained");
    };
    assert!(
        why.contains("in capacity reservation cr-0b10c4000000000001, type capacity-block")
            && why.contains("its Capacity Block ends in 40 minutes"),
        "{why}"
    );

    let refused = CAPACITY_BLOCK.replace(", endsAfter: 60m", "");
    let error = parse(&refused, "no-end").unwrap_err();
    assert!(
        format!("{error:#}").contains("reservations[0].endsAfter: a capacity-block ends"),
        "{error:#}"
    );
}

/// On-demand c6i.2xlarge nodes, then the NodePool is allowed the reservation of 10 beside
/// them: consolidation replaces each node by one in the reservation (it costs next to
/// nothing), and the edit of the NodePool's requirements alone is what lets it look again.
#[test]
fn consolidation_moves_on_demand_nodes_into_a_reservation_the_pool_may_use() {
    let on_demand_only = RESERVATIONS
        .replace("values: [reserved, on-demand]", "values: [on-demand]")
        .replace("duration: 20m", "duration: 40m")
        .replace(
            "{key: karpenter.k8s.aws/instance-generation, operator: Gt, values: [\"5\"]}",
            "{key: node.kubernetes.io/instance-type, operator: In, values: [c6i.2xlarge]}",
        );
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&on_demand_only).unwrap();
    let pool = yaml["manifests"]
        .as_str()
        .unwrap()
        .split("---")
        .nth(1)
        .unwrap();
    let widened = pool.replace("values: [on-demand]", "values: [reserved, on-demand]");
    let indented: String = widened.lines().map(|l| format!("        {l}\n")).collect();
    let text = on_demand_only.replace(
        "  - at: 10m\n    scale: {deployment: train, replicas: 24}",
        &format!("  - at: 5m\n    apply:\n      manifests: |\n{indented}"),
    );
    let scenario = parse(&text, "consolidate-into-reservation").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-into-reservation")).unwrap();
    assert_eq!(report.pods_bound, 20, "{report:#?}");
    assert_eq!(
        report
            .nodes
            .iter()
            .map(|g| (g.capacity_type.as_str(), g.count))
            .collect::<Vec<_>>(),
        vec![("reserved", 10)],
        "{report:#?}"
    );
    assert_eq!(report.nodeclaims_launched, 20, "{report:#?}");
    let verified = karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");
}
