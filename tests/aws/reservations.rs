//! A capacity reservation on the emulator, end to end: the run's EC2NodeClass selects an
//! ODCR of 2 × m5.large, the first two nodes launch into it, the third pod's node is
//! on-demand, and `journal explain` names the reservation of each reserved node.

use super::*;
use karpenter_aws::testing::create_capacity_reservation;

const RESERVED: &str = r#"
name: reserved
duration: 45s
region: us-west-2
bootDelay: 3s
readyDelay: 2s
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: KarpenterNodeRole-demo
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
    securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
    capacityReservationSelectorTerms: [{tags: {team: ml}}]
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
          - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
          - {key: topology.kubernetes.io/zone, operator: In, values: [ZONE]}
deployments:
  - {name: train, cpu: 1500m, memory: 1Gi, replicas: 3, labels: {app: train}}
"#;

#[test]
fn an_emulator_reservation_is_filled_first_and_explained() {
    let setup = tokio::runtime::Runtime::new().unwrap();
    // A server of its own: this binary's tests run side by side.
    let moto = Moto::start();
    moto.reset();
    let clients = setup.block_on(Clients::connect(&connection(&moto.endpoint())));
    let (fixture, reservation) = setup.block_on(async {
        let fixture = Fixture::create_with(&clients, "demo", &ami_lookup())
            .await
            .unwrap();
        let zone = fixture.subnets.keys().next().unwrap().clone();
        let tags = [("team".to_owned(), "ml".to_owned())].into();
        let reservation = create_capacity_reservation(&clients, "m5.large", &zone, 2, &tags)
            .await
            .unwrap();
        (fixture, reservation)
    });
    let zone = fixture.subnets.keys().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(&RESERVED.replace("ZONE", zone), "reserved.yaml").unwrap();
    let report = run(
        &scenario,
        &options(dir.path(), "aws-reserved", &moto.endpoint(), None),
    )
    .unwrap();
    assert!(
        report.actor_failures.is_empty(),
        "{:?}",
        report.actor_failures
    );
    assert_eq!(report.pods_pending, 0, "{report:?}");
    assert_eq!(report.pods_bound, 3);

    let journal = Journal::<DomainEvent>::open(dir.path()).unwrap();
    let launched: Vec<(String, karpenter_core::ports::Instance)> = journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance,
                ..
            } => Some((nodeclaim, *instance)),
            _ => None,
        })
        .collect();
    assert_eq!(launched.len(), 3, "{launched:?}");
    let reserved: Vec<&(String, karpenter_core::ports::Instance)> = launched
        .iter()
        .filter(|(_, i)| i.capacity_type == karpenter_core::model::CapacityType::Reserved)
        .collect();
    assert_eq!(reserved.len(), 2, "{launched:?}");
    for (nodeclaim, instance) in &reserved {
        assert_eq!(
            instance.reservation.as_ref().map(|r| r.id.as_str()),
            Some(reservation.as_str())
        );
        match karpenter_rs::explain::nodeclaim(&journal, nodeclaim).unwrap() {
            karpenter_rs::explain::Explanation::Found { text, .. } => assert!(
                text.contains(&format!(
                    "in capacity reservation {reservation}, type default"
                )),
                "{text}"
            ),
            karpenter_rs::explain::Explanation::NotFound => panic!("{nodeclaim} not explained"),
        }
    }
    assert!(
        launched
            .iter()
            .any(|(_, i)| i.capacity_type == karpenter_core::model::CapacityType::OnDemand),
        "the third pod's node is on-demand: {launched:?}"
    );
}
