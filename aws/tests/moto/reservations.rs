//! Capacity reservations on moto (through scripts/moto_reservations.py): a targeted ODCR
//! filled first and then on-demand, a reservation used up between plan and launch, drift
//! when the class stops selecting it, and Capacity Blocks offered until they are expiring.

use super::*;
use karpenter_core::model::ReservationKind;

/// The `default` class selecting reservations tagged `team=ml`.
fn selecting_ml(fixture: &Fixture) -> karpenter_core::api::EC2NodeClass {
    let mut class = fixture.node_class("default");
    class.spec.capacity_reservation_selector_terms =
        serde_json::from_value(serde_json::json!([{"tags": {"team": "ml"}}])).unwrap();
    class
}

fn reserved_or_on_demand(nodeclaim: &str, zone: &str) -> LaunchRequest {
    let mut launch = request(nodeclaim, &["m5.large"], "on-demand");
    launch.requirements = Requirements::new();
    launch.requirements.add(
        "karpenter.sh/capacity-type",
        Requirement::is_in(["reserved", "on-demand"]),
    );
    launch
        .requirements
        .add("topology.kubernetes.io/zone", Requirement::is_in([zone]));
    launch
}

async fn odcr(direct: &Clients, zone: &str, count: i32) -> String {
    let tags = [("team".to_owned(), "ml".to_owned())].into();
    karpenter_aws::testing::create_capacity_reservation(direct, "m5.large", zone, count, &tags)
        .await
        .unwrap()
}

fn reserved_offering(
    types: &[Arc<karpenter_core::model::InstanceType>],
    zone: &str,
) -> Option<karpenter_core::model::Offering> {
    let m5 = types.iter().find(|t| t.name == "m5.large")?;
    m5.offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == CapacityType::Reserved)
        .cloned()
}

/// Upstream's targeted-ODCR case: the first two m5.large launch into the reservation (and
/// say so), the third on-demand; EC2 refusing a reservation that filled behind a stale
/// count is insufficient capacity for that offering, which is then offered as full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targeted_reservation_is_filled_first_then_launches_go_on_demand() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, cloud) = setup(moto, &moto.endpoint()).await;
    let zone = fixture.subnets.keys().next().unwrap().clone();
    let id = odcr(&direct, &zone, 2).await;
    cloud.set_node_class(selecting_ml(&fixture));
    // A second provider (another replica's view) resolves while the reservation is empty.
    let stale = AwsCloud::new(
        direct.ec2.clone(),
        direct.ssm.clone(),
        direct.iam.clone(),
        settings(),
    )
    .unwrap();
    stale.set_node_class(selecting_ml(&fixture));
    assert!(reserved_offering(&stale.instance_types("default").await.unwrap(), &zone).is_some());

    let resolved = cloud.resolve("default").await.unwrap();
    assert_eq!(resolved.ready(), Ok(()), "{:?}", resolved.conditions);
    let status = resolved.status(Some(1), 0);
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "CapacityReservationsReady" && c.status == "True")
    );
    let listed = &status.capacity_reservations;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].instance_type, "m5.large");
    assert_eq!(listed[0].availability_zone, zone);
    assert_eq!(listed[0].reservation_type.as_deref(), Some("default"));
    assert_eq!(listed[0].state.as_deref(), Some("active"));
    assert_eq!(listed[0].owner_id.len(), 12);

    let types = cloud.instance_types("default").await.unwrap();
    let offering = reserved_offering(&types, &zone).expect("a reserved m5.large offering");
    assert_eq!(offering.reserved.as_ref().map(|r| r.remaining), Some(2));
    assert!(offering.price < 1e-6, "reserved price {}", offering.price);

    let mut launched = Vec::new();
    for n in 0..3 {
        let instance = cloud
            .create(&reserved_or_on_demand(&format!("default-r{n}"), &zone))
            .await
            .unwrap();
        launched.push(instance);
    }
    for instance in &launched[..2] {
        assert_eq!(instance.capacity_type, CapacityType::Reserved);
        assert_eq!(
            instance.reservation.as_ref().map(|r| r.id.as_str()),
            Some(id.as_str())
        );
        assert!(
            instance
                .price_source
                .as_deref()
                .unwrap_or("")
                .starts_with(&format!("reserved capacity {id}")),
            "{:?}",
            instance.price_source
        );
    }
    assert_eq!(launched[2].capacity_type, CapacityType::OnDemand);
    assert_eq!(launched[2].reservation, None);
    // EC2 agrees: two instances in the reservation, none left, the third outside it.
    let described = direct
        .ec2
        .describe_capacity_reservations()
        .capacity_reservation_ids(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        described.capacity_reservations()[0].available_instance_count(),
        Some(0)
    );
    let got = cloud.get(&launched[0].id).await.unwrap();
    assert_eq!(got.capacity_type, CapacityType::Reserved);
    assert_eq!(got.reservation, launched[0].reservation);
    let got = cloud.get(&launched[2].id).await.unwrap();
    assert_eq!(got.capacity_type, CapacityType::OnDemand);
    let offering =
        reserved_offering(&cloud.instance_types("default").await.unwrap(), &zone).unwrap();
    assert!(!offering.available);

    // The other view still counts two: EC2 refuses, and the offering is then full.
    match stale
        .create(&LaunchRequest {
            requirements: {
                let mut r = reserved_or_on_demand("default-stale", &zone).requirements;
                r.add(
                    "karpenter.sh/capacity-type",
                    Requirement::is_in(["reserved"]),
                );
                r
            },
            ..reserved_or_on_demand("default-stale", &zone)
        })
        .await
    {
        Err(CloudError::InsufficientCapacity { offerings }) => assert_eq!(
            offerings,
            vec![OfferingKey {
                instance_type: "m5.large".into(),
                zone: zone.clone(),
                capacity_type: CapacityType::Reserved,
            }]
        ),
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    let offering =
        reserved_offering(&stale.instance_types("default").await.unwrap(), &zone).unwrap();
    assert!(!offering.available);
    assert_eq!(offering.reserved.as_ref().map(|r| r.remaining), Some(0));

    // The class stops selecting the reservation: its reserved instances drift.
    let check = karpenter_core::ports::DriftCheck {
        nodeclaim: "default-r0".into(),
        node_class: "default".into(),
        instance: launched[0].clone(),
        node_class_hash: None,
    };
    assert_eq!(cloud.drift(&check).await.unwrap(), None);
    let mut class = fixture.node_class("default");
    class.spec.capacity_reservation_selector_terms =
        serde_json::from_value(serde_json::json!([{"tags": {"team": "web"}}])).unwrap();
    cloud.set_node_class(class);
    assert_eq!(
        cloud
            .drift(&check)
            .await
            .unwrap()
            .map(|d| d.reason)
            .as_deref(),
        Some("CapacityReservationDrift")
    );
    let on_demand = karpenter_core::ports::DriftCheck {
        instance: launched[2].clone(),
        ..check
    };
    assert_eq!(cloud.drift(&on_demand).await.unwrap(), None);
}

/// A Capacity Block is offered and launched into with the capacity-block market until it is
/// expiring (40 minutes before its end): then it is reported `expiring`, offered no more,
/// and its instances are the ones the interruption actor is told to drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_block_launches_until_it_is_expiring_and_its_nodes_are_then_drained() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, cloud) = setup(moto, &moto.endpoint()).await;
    let zone = fixture.subnets.keys().next().unwrap().clone();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let started = now_ms();
    // It starts expiring 20 s from now.
    let end_ms = started + 40 * 60 * 1000 + 20_000;
    let tags: BTreeMap<String, String> = [("team".to_owned(), "ml".to_owned())].into();
    let block = moto.capacity_block("m5.large", &zone, 2, end_ms / 1000, &tags);
    cloud.set_node_class(selecting_ml(&fixture));
    let types = cloud.instance_types("default").await.unwrap();
    let offering = reserved_offering(&types, &zone).expect("the block is offered");
    assert_eq!(
        offering.reservation().map(|r| (r.id.clone(), r.kind)),
        Some((block.clone(), ReservationKind::CapacityBlock))
    );
    let instance = cloud
        .create(&reserved_or_on_demand("default-block", &zone))
        .await
        .unwrap();
    assert_eq!(instance.capacity_type, CapacityType::Reserved);
    assert_eq!(
        instance.reservation.as_ref().map(|r| r.kind),
        Some(ReservationKind::CapacityBlock)
    );
    let reported = direct
        .ec2
        .describe_instances()
        .instance_ids(&instance.id)
        .send()
        .await
        .unwrap();
    let ec2_instance = &reported.reservations()[0].instances()[0];
    assert_eq!(ec2_instance.capacity_reservation_id(), Some(block.as_str()));
    assert_eq!(
        ec2_instance.instance_lifecycle(),
        Some(&aws_sdk_ec2::types::InstanceLifecycleType::CapacityBlock)
    );
    let got = cloud.get(&instance.id).await.unwrap();
    assert_eq!(got.reservation, instance.reservation);
    assert_eq!(
        cloud.expiring_block_instances().await.unwrap(),
        Some(Vec::new())
    );

    // Once it is expiring: reported so, not offered, its instance to be drained.
    let wait = (end_ms - 40 * 60 * 1000 - now_ms() + 1_000).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    cloud.set_node_class(selecting_ml(&fixture));
    let resolved = cloud.resolve("default").await.unwrap();
    let status = resolved.status(Some(1), now_ms());
    assert_eq!(status.capacity_reservations.len(), 1);
    assert_eq!(
        status.capacity_reservations[0].state.as_deref(),
        Some("expiring")
    );
    assert_eq!(
        status.capacity_reservations[0].reservation_type.as_deref(),
        Some("capacity-block")
    );
    assert!(reserved_offering(&cloud.instance_types("default").await.unwrap(), &zone).is_none());
    assert_eq!(
        cloud.expiring_block_instances().await.unwrap(),
        Some(vec![instance.id.clone()])
    );
}
