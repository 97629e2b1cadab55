use super::*;
use karpenter_core::model::{Offering, Requirement, Resources};

fn subnet(id: &str, zone: &str, ips: i64) -> Subnet {
    Subnet {
        id: id.into(),
        zone: zone.into(),
        zone_id: None,
        available_ips: ips,
    }
}

fn arch(value: &str) -> Requirements {
    let mut r = Requirements::new();
    r.add("kubernetes.io/arch", Requirement::is_in([value]));
    r
}

fn ami(id: &str, created: &str, arch_value: &str, deprecated: bool) -> Ami {
    Ami {
        id: id.into(),
        name: id.into(),
        created: created.into(),
        deprecated,
        requirements: arch(arch_value),
    }
}

fn instance_type(
    name: &str,
    arch_value: &str,
    offerings: &[(&str, CapacityType, f64)],
) -> InstanceType {
    InstanceType::new(
        name.to_owned(),
        [("kubernetes.io/arch".to_owned(), arch_value.to_owned())].into(),
        Resources::cpu_memory(2000, 8 << 30),
        Resources::default(),
        offerings
            .iter()
            .map(|(zone, capacity_type, price)| Offering::new(*zone, *capacity_type, *price, true))
            .collect(),
    )
}

#[test]
fn subnet_with_most_free_addresses_wins_per_zone() {
    let chosen = subnet_per_zone(&[
        subnet("subnet-b", "us-west-2a", 100),
        subnet("subnet-a", "us-west-2a", 250),
        subnet("subnet-c", "us-west-2b", 10),
        subnet("subnet-d", "us-west-2b", 10),
    ]);
    assert_eq!(chosen["us-west-2a"].id, "subnet-a");
    assert_eq!(
        chosen["us-west-2b"].id, "subnet-c",
        "ties go to the lowest id"
    );
}

#[test]
fn newest_non_deprecated_image_per_requirement_set() {
    let amis = newest_per_requirements(&[
        ami("ami-old", "2024-01-01T00:00:00.000Z", "amd64", false),
        ami("ami-new", "2024-06-01T00:00:00.000Z", "amd64", false),
        ami(
            "ami-newest-deprecated",
            "2024-09-01T00:00:00.000Z",
            "amd64",
            true,
        ),
        ami(
            "ami-arm-deprecated",
            "2024-02-01T00:00:00.000Z",
            "arm64",
            true,
        ),
    ]);
    let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec!["ami-new", "ami-arm-deprecated"]);
    let graviton = instance_type("m7g.large", "arm64", &[]);
    assert_eq!(
        ami_for(&amis, &graviton).map(|a| a.id.as_str()),
        Some("ami-arm-deprecated")
    );
}

#[test]
fn fleet_prefers_spot_orders_by_price_and_skips_unavailable_offerings() {
    let now = Instant::now();
    let m5 = instance_type(
        "m5.large",
        "amd64",
        &[
            ("us-west-2a", CapacityType::Spot, 0.04),
            ("us-west-2b", CapacityType::Spot, 0.03),
            ("us-west-2a", CapacityType::OnDemand, 0.096),
            ("us-west-2c", CapacityType::Spot, 0.01),
        ],
    );
    let c5 = instance_type(
        "c5.large",
        "amd64",
        &[("us-west-2a", CapacityType::Spot, 0.035)],
    );
    let subnets = subnet_per_zone(&[
        subnet("subnet-a", "us-west-2a", 9),
        subnet("subnet-b", "us-west-2b", 9),
    ]);
    let amis = vec![ami("ami-x86", "2024", "amd64", false)];
    let mut ice = UnavailableOfferings::default();
    ice.mark(
        OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-west-2b".into(),
            capacity_type: CapacityType::Spot,
        },
        now,
    );
    let plan = plan_fleet(
        &[&m5, &c5],
        &Requirements::new(),
        &subnets,
        &amis,
        &ice,
        now,
    )
    .unwrap();
    assert_eq!(plan.capacity_type, CapacityType::Spot);
    let got: Vec<(&str, &str)> = plan
        .overrides
        .iter()
        .map(|o| (o.instance_type.as_str(), o.subnet_id.as_str()))
        .collect();
    // us-west-2c has no subnet; 2b is ICE'd.
    assert_eq!(
        got,
        vec![("c5.large", "subnet-a"), ("m5.large", "subnet-a")]
    );
    assert!(plan.overrides.iter().all(|o| o.image_id == "ami-x86"));

    let mut on_demand_only = Requirements::new();
    on_demand_only.add(
        "karpenter.sh/capacity-type",
        Requirement::is_in(["on-demand"]),
    );
    let plan = plan_fleet(&[&m5, &c5], &on_demand_only, &subnets, &amis, &ice, now).unwrap();
    assert_eq!(plan.capacity_type, CapacityType::OnDemand);
    assert_eq!(plan.overrides.len(), 1);

    // After the TTL the offering is back.
    assert!(!ice.is_unavailable(
        &OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-west-2b".into(),
            capacity_type: CapacityType::Spot
        },
        now + UNAVAILABLE_OFFERING_TTL
    ));
}

#[test]
fn fleet_reports_why_nothing_can_launch() {
    let now = Instant::now();
    let graviton = instance_type(
        "m7g.large",
        "arm64",
        &[("us-west-2a", CapacityType::Spot, 0.04)],
    );
    let subnets = subnet_per_zone(&[subnet("subnet-a", "us-west-2a", 9)]);
    let x86_only = vec![ami("ami-x86", "2024", "amd64", false)];
    let err = plan_fleet(
        &[&graviton],
        &Requirements::new(),
        &subnets,
        &x86_only,
        &UnavailableOfferings::default(),
        now,
    )
    .unwrap_err();
    assert_eq!(
        err,
        FleetPlanError::Unlaunchable("no resolved AMI can boot m7g.large".into())
    );

    let arm = vec![ami("ami-arm", "2024", "arm64", false)];
    let mut ice = UnavailableOfferings::default();
    let key = OfferingKey {
        instance_type: "m7g.large".into(),
        zone: "us-west-2a".into(),
        capacity_type: CapacityType::Spot,
    };
    ice.mark(key.clone(), now);
    let err = plan_fleet(
        &[&graviton],
        &Requirements::new(),
        &subnets,
        &arm,
        &ice,
        now,
    )
    .unwrap_err();
    assert_eq!(err, FleetPlanError::AllUnavailable(vec![key]));
}

#[test]
fn at_most_sixty_overrides() {
    let now = Instant::now();
    let zones: Vec<String> = (0..4).map(|z| format!("zone-{z}")).collect();
    let types: Vec<InstanceType> = (0..30)
        .map(|i| {
            let offerings: Vec<(&str, CapacityType, f64)> = zones
                .iter()
                .map(|z| (z.as_str(), CapacityType::OnDemand, 1.0 + i as f64))
                .collect();
            instance_type(&format!("t{i}.large"), "amd64", &offerings)
        })
        .collect();
    let refs: Vec<&InstanceType> = types.iter().collect();
    let subnets = subnet_per_zone(
        &zones
            .iter()
            .map(|z| subnet(&format!("subnet-{z}"), z, 5))
            .collect::<Vec<_>>(),
    );
    let plan = plan_fleet(
        &refs,
        &Requirements::new(),
        &subnets,
        &[ami("ami-1", "x", "amd64", false)],
        &UnavailableOfferings::default(),
        now,
    )
    .unwrap();
    assert_eq!(plan.overrides.len(), MAX_FLEET_OVERRIDES);
    assert!(plan.overrides.windows(2).all(|w| w[0].price <= w[1].price));
    assert_eq!(plan.overrides.last().map(|o| o.price), Some(15.0));
}

#[test]
fn error_codes_are_classified() {
    assert!(is_capacity_error("InsufficientInstanceCapacity"));
    assert!(is_capacity_error("MaxSpotInstanceCountExceeded"));
    assert!(!is_capacity_error("RequestLimitExceeded"));
    assert!(is_auth_error("UnauthorizedOperation"));
    assert!(!is_auth_error("InvalidParameterValue"));
}

#[test]
fn prioritizing_puts_the_named_types_first_and_marks_the_plan() {
    let over = |t: &str, zone: &str, price: f64| FleetOverride {
        instance_type: t.into(),
        zone: zone.into(),
        subnet_id: format!("subnet-{zone}"),
        image_id: "ami-1".into(),
        price,
        reservation: None,
    };
    let mut plan = FleetPlan {
        capacity_type: CapacityType::OnDemand,
        overrides: vec![
            over("c6i.large", "a", 0.085),
            over("c6i.large", "b", 0.085),
            over("r6i.large", "a", 0.126),
            over("m6i.large", "a", 0.096),
        ],
        prioritized: false,
    };
    plan.prioritize(&["m6i.large", "c6i.large"]);
    let order: Vec<(&str, &str)> = (plan.overrides.iter())
        .map(|o| (o.instance_type.as_str(), o.zone.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("m6i.large", "a"),
            ("c6i.large", "a"),
            ("c6i.large", "b"),
            ("r6i.large", "a")
        ]
    );
    assert!(plan.prioritized);
}
