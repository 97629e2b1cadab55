//! The AWS provider against moto, a real EC2/SSM/SQS API emulator on 127.0.0.1, with a
//! fault-injecting proxy in front of it for what moto cannot emulate (insufficient capacity
//! reported in CreateFleet's errorSet, throttling, 5xx, permission errors).
//!
//! Tests share one moto process and take turns (`Moto::exclusive`), resetting it first.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_aws::config::Clients;
use karpenter_aws::nodeclass::AmiLookup;
use karpenter_aws::provider::{AwsCloud, AwsSettings};
use karpenter_aws::sqs::{Polling, SqsQueue};
use karpenter_aws::testing::{
    Fault, FaultProxy, Fixture, KUBERNETES_VERSION, Moto, SSM_PREFIX, connection,
};
use karpenter_core::model::{CapacityType, Requirement, Requirements};
use karpenter_core::ports::{
    CloudError, CloudProvider, InstanceState, InterruptionQueue, LaunchRequest, OfferingKey,
    QueueMessageContent,
};
use karpenter_core::scheduling::InstanceTypeOption;

#[path = "moto/cluster.rs"]
mod cluster;
#[path = "moto/history.rs"]
mod history;
#[path = "moto/reservations.rs"]
mod reservations;

const CLUSTER: &str = "moto-test";

fn settings() -> AwsSettings {
    AwsSettings {
        cluster: karpenter_aws::bootstrap::ClusterInfo {
            name: CLUSTER.into(),
            endpoint: "https://example.eks.amazonaws.com".into(),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: None,
        },
        region: "us-west-2".into(),
        vm_memory_overhead_permille: 75,
        nodeclass_refresh: Duration::from_secs(60),
        catalog_refresh: Duration::from_secs(12 * 3600),
        ami_lookup: AmiLookup {
            ssm_prefix: SSM_PREFIX.into(),
            kubernetes_version: KUBERNETES_VERSION.into(),
        },
        reserved_capacity: true,
    }
}

/// A reset moto with the fixture, and a provider pointed at `endpoint` (moto itself or a
/// proxy in front of it).
async fn setup(moto: &Moto, endpoint: &str) -> (Clients, Fixture, Arc<AwsCloud>) {
    moto.reset();
    let direct = Clients::connect(&connection(&moto.endpoint())).await;
    let fixture = Fixture::create(&direct, CLUSTER).await.expect("fixture");
    let clients = Clients::connect(&connection(endpoint)).await;
    let cloud = AwsCloud::new(
        clients.ec2.clone(),
        clients.ssm.clone(),
        clients.iam.clone(),
        settings(),
    )
    .unwrap();
    cloud.set_node_class(fixture.node_class("default"));
    (direct, fixture, Arc::new(cloud))
}

fn request(nodeclaim: &str, types: &[&str], capacity_type: &str) -> LaunchRequest {
    let mut requirements = Requirements::new();
    requirements.add(
        "karpenter.sh/capacity-type",
        Requirement::is_in([capacity_type]),
    );
    LaunchRequest {
        nodeclaim: nodeclaim.into(),
        nodepool: "default".into(),
        client_token: format!("token-{nodeclaim}"),
        node_class: "default".into(),
        requirements,
        labels: [("team".to_owned(), "web".to_owned())].into(),
        taints: Vec::new(),
        instance_types: types
            .iter()
            .map(|t| InstanceTypeOption {
                name: (*t).into(),
                price: 0.0,
                zone: "us-west-2a".into(),
                capacity_type: CapacityType::OnDemand,
            })
            .collect(),
        overlaid: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_class_resolves_and_instances_launch_through_create_fleet() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, cloud) = setup(moto, &moto.endpoint()).await;

    let resolved = cloud.resolve("default").await.unwrap();
    assert_eq!(resolved.ready(), Ok(()), "{:?}", resolved.conditions);
    assert_eq!(
        resolved.subnet_per_zone.keys().collect::<Vec<_>>(),
        vec!["us-west-2a", "us-west-2b"]
    );
    assert_eq!(resolved.security_groups.len(), 1);
    let ami_ids: Vec<&str> = resolved.amis.iter().map(|a| a.id.as_str()).collect();
    assert!(
        ami_ids.contains(&fixture.amis["x86_64"].as_str()),
        "{ami_ids:?}"
    );
    assert!(
        ami_ids.contains(&fixture.amis["arm64"].as_str()),
        "{ami_ids:?}"
    );
    let status = resolved.status(Some(1), 0);
    assert!(status.conditions.iter().all(|c| c.status == "True"));

    let types = cloud.instance_types("default").await.unwrap();
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large offered");
    assert!(
        m5.offerings
            .iter()
            .any(|o| o.zone == "us-west-2b" && o.capacity_type == CapacityType::Spot)
    );
    assert!(
        m5.offerings.iter().all(|o| o.zone != "us-west-2c"),
        "zones without a subnet are not offered"
    );
    assert_eq!(
        m5.capacity.get(karpenter_core::model::ResourceName::Pods),
        29
    );

    let launch = request("default-abc12", &["m5.large", "m5.xlarge"], "on-demand");
    let instance = cloud.create(&launch).await.unwrap();
    assert_eq!(
        instance.instance_type, "m5.large",
        "overrides are price-ordered"
    );
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.nodeclaim, "default-abc12");
    assert!(instance.provider_id.starts_with("aws:///us-west-2"));
    assert!(
        (instance.price - 0.096).abs() < 1e-9,
        "price {}",
        instance.price
    );

    // The instance carries upstream's tags, and its launch template the bootstrap.
    let described = direct
        .ec2
        .describe_instances()
        .instance_ids(&instance.id)
        .send()
        .await
        .unwrap();
    let ec2_instance = &described.reservations()[0].instances()[0];
    let tags: BTreeMap<&str, &str> = ec2_instance
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    for (key, value) in [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-abc12"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("kubernetes.io/cluster/moto-test", "owned"),
        ("eks:eks-cluster-name", "moto-test"),
        ("team", "platform"),
    ] {
        assert_eq!(tags.get(key), Some(&value), "tag {key}: {tags:?}");
    }
    assert_eq!(
        ec2_instance.image_id(),
        Some(fixture.amis["x86_64"].as_str())
    );
    let templates = direct.ec2.describe_launch_templates().send().await.unwrap();
    let names: Vec<&str> = templates
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("karpenter.k8s.aws/"));
    let versions = direct
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(names[0])
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );
    use base64::Engine as _;
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(user_data.contains("kind: NodeConfig"), "{user_data}");
    assert!(user_data.contains("karpenter.sh/unregistered=:NoExecute"));

    // A launch template deleted behind our back is recreated, and the launch goes through.
    direct
        .ec2
        .delete_launch_template()
        .launch_template_name(names[0])
        .send()
        .await
        .unwrap();
    let second = cloud
        .create(&request("default-lt2", &["m5.large"], "on-demand"))
        .await
        .unwrap();
    assert_eq!(second.instance_type, "m5.large");
    cloud.delete(&second.id).await.unwrap();

    // A retried or replayed launch of the same NodeClaim gets the same instance.
    let again = cloud.create(&launch).await.unwrap();
    assert_eq!(again.id, instance.id);

    // get, list, delete (idempotent), get after delete.
    let got = cloud.get(&instance.id).await.unwrap();
    assert_eq!(got.nodeclaim, "default-abc12");
    assert_eq!(got.state, InstanceState::Running);
    let listed = cloud.list().await.unwrap();
    let running: Vec<&str> = listed
        .iter()
        .filter(|i| i.state == InstanceState::Running)
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(running, vec![instance.id.as_str()]);
    assert!(
        listed.iter().any(|i| i.id == second.id),
        "terminated instances are listed too"
    );
    cloud.delete(&instance.id).await.unwrap();
    cloud.delete(&instance.id).await.unwrap();
    assert_ne!(
        cloud.get(&instance.id).await.unwrap().state,
        InstanceState::Running
    );
    assert!(matches!(
        cloud.get("i-0123456789abcdef0").await,
        Err(CloudError::NotFound { .. })
    ));
    cloud.delete("i-0123456789abcdef0").await.unwrap();

    // Launch templates unused for longer than the idle time are collected.
    let deleted = cloud
        .collect_launch_templates(Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(deleted, vec![names[0].to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_marks_offerings_and_is_reported() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let proxy = FaultProxy::start(moto.addr()).await;
    let (_direct, fixture, cloud) = setup(moto, &proxy.endpoint()).await;
    let subnet_a = fixture.subnets["us-west-2a"].clone();
    let subnet_b = fixture.subnets["us-west-2b"].clone();
    proxy.inject(Fault::create_fleet_errors(
        "InsufficientInstanceCapacity",
        &[
            ("m5.large", &subnet_a, "us-west-2a"),
            ("m5.large", &subnet_b, "us-west-2b"),
        ],
        Some(1),
    ));
    let launch = request("default-ice01", &["m5.large"], "on-demand");
    match cloud.create(&launch).await {
        Err(CloudError::InsufficientCapacity { offerings }) => assert_eq!(
            offerings,
            vec![
                OfferingKey {
                    instance_type: "m5.large".into(),
                    zone: "us-west-2a".into(),
                    capacity_type: CapacityType::OnDemand
                },
                OfferingKey {
                    instance_type: "m5.large".into(),
                    zone: "us-west-2b".into(),
                    capacity_type: CapacityType::OnDemand
                },
            ]
        ),
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert_eq!(proxy.injected("CreateFleet"), 1);
    // Both offerings are now cached as unavailable: no second CreateFleet is even tried.
    let fleets_before = proxy.hits("CreateFleet");
    let second = cloud.create(&launch).await;
    assert!(
        matches!(second, Err(CloudError::InsufficientCapacity { .. })),
        "{second:?}"
    );
    assert_eq!(proxy.hits("CreateFleet"), fleets_before);
    let types = cloud.instance_types("default").await.unwrap();
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    assert!(
        m5.offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .all(|o| !o.available)
    );
    // Another type is still launchable; identical launches share one CreateFleet.
    let fleets_before = proxy.hits("CreateFleet");
    let launches: Vec<_> = ["default-many1", "default-many2", "default-many3"]
        .into_iter()
        .map(|name| {
            let cloud = cloud.clone();
            tokio::spawn(async move {
                cloud
                    .create(&request(name, &["c5.large"], "on-demand"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut batch = Vec::new();
    for launch in launches {
        batch.push(launch.await.unwrap());
    }
    assert_eq!(
        proxy.hits("CreateFleet") - fleets_before,
        1,
        "one call for three"
    );
    let mut ids: Vec<&str> = batch.iter().map(|i| i.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    for instance in &batch {
        let got = cloud.get(&instance.id).await.unwrap();
        assert_eq!(
            got.nodeclaim, instance.nodeclaim,
            "tagged with its own NodeClaim"
        );
    }
    // Another type is still launchable.
    let other = cloud
        .create(&request(
            "default-ice02",
            &["m5.large", "c5.large"],
            "on-demand",
        ))
        .await
        .unwrap();
    assert_eq!(other.instance_type, "c5.large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_server_errors_are_retried_and_permission_errors_surface() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let proxy = FaultProxy::start(moto.addr()).await;
    let (_direct, _fixture, cloud) = setup(moto, &proxy.endpoint()).await;

    proxy.inject(Fault::ec2_error(
        "DescribeSubnets",
        503,
        "RequestLimitExceeded",
        Some(2),
    ));
    proxy.inject(Fault::ec2_error(
        "DescribeSecurityGroups",
        500,
        "InternalError",
        Some(2),
    ));
    let resolved = cloud.resolve("default").await.unwrap();
    assert_eq!(resolved.ready(), Ok(()), "{:?}", resolved.conditions);
    assert_eq!(proxy.injected("DescribeSubnets"), 2);
    assert_eq!(
        proxy.hits("DescribeSubnets"),
        3,
        "two throttled attempts, then success"
    );
    assert_eq!(proxy.hits("DescribeSecurityGroups"), 3);

    // A permission problem is a NodeClass condition, and launches say so instead of looping.
    proxy.inject(Fault::ec2_error(
        "DescribeSubnets",
        403,
        "UnauthorizedOperation",
        None,
    ));
    let mut node_class = _fixture.node_class("default");
    node_class.spec.tags.insert("changed".into(), "yes".into());
    cloud.set_node_class(node_class);
    let resolved = cloud.resolve("default").await.unwrap();
    let subnets = resolved
        .conditions
        .iter()
        .find(|c| c.kind == "SubnetsReady")
        .unwrap();
    assert!(!subnets.ok);
    assert_eq!(subnets.reason, "Unauthorized");
    assert!(
        subnets.message.contains("UnauthorizedOperation"),
        "{}",
        subnets.message
    );
    let ready = resolved.conditions.last().unwrap();
    assert_eq!((ready.kind, ready.ok), ("Ready", false));
    assert_eq!(
        proxy.hits("DescribeSubnets") - 3,
        1,
        "permission errors are not retried"
    );
    match cloud
        .create(&request("default-auth1", &["m5.large"], "on-demand"))
        .await
    {
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            assert!(reason.contains("SubnetsReady"), "{reason}")
        }
        other => panic!("expected NodeClassNotReady, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_queue_parses_and_deletes_messages() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    moto.reset();
    let clients = Clients::connect(&connection(&moto.endpoint())).await;
    let url = clients
        .sqs
        .create_queue()
        .queue_name("interruptions")
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let spot = r#"{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-22T10:00:00Z","region":"us-west-2","resources":[],"detail":{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}}"#;
    for body in [spot, "garbage"] {
        clients
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let queue = SqsQueue::connect(
        clients.sqs.clone(),
        "interruptions",
        Polling {
            max_messages: 10,
            wait_seconds: 1,
            visibility_seconds: 20,
        },
    )
    .await
    .unwrap();
    assert_eq!(queue.url(), url);
    let mut received = Vec::new();
    for _ in 0..5 {
        received.extend(queue.receive().await.unwrap());
        if received.len() == 2 {
            break;
        }
    }
    assert_eq!(received.len(), 2);
    assert!(received.iter().any(|m| matches!(
        &m.content,
        QueueMessageContent::Notice { instance_ids, .. } if instance_ids == &vec!["i-0123456789abcdef0".to_owned()]
    )));
    assert!(
        received
            .iter()
            .any(|m| matches!(m.content, QueueMessageContent::Malformed { .. }))
    );
    for message in &received {
        queue.delete(&message.receipt).await.unwrap();
    }
    let attributes = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        "0"
    );
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        "0"
    );
    assert!(
        SqsQueue::connect(clients.sqs.clone(), "missing", Polling::default())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_drifts_when_its_node_class_or_what_it_selects_changes() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, cloud) = setup(moto, &moto.endpoint()).await;
    let stamped = cloud.node_class_hash("default").expect("a known class");
    let mut launch = request("default-drift", &["m5.large"], "on-demand");
    // Only the first zone, so the instance's subnet is known.
    let (zone, subnet) = fixture.subnets.iter().next().unwrap();
    launch.requirements.add(
        "topology.kubernetes.io/zone",
        Requirement::is_in([zone.as_str()]),
    );
    let instance = cloud.create(&launch).await.unwrap();
    let check = karpenter_core::ports::DriftCheck {
        nodeclaim: "default-drift".into(),
        node_class: "default".into(),
        instance,
        node_class_hash: Some(stamped.clone()),
    };
    let reason = |d: Option<karpenter_core::ports::Drift>| d.map(|d| d.reason);
    assert_eq!(reason(cloud.drift(&check).await.unwrap()), None);

    // A static field: the class's hash moves.
    let mut class = fixture.node_class("default");
    class.spec.tags.insert("cost-center".into(), "42".into());
    cloud.set_node_class(class);
    assert_eq!(
        reason(cloud.drift(&check).await.unwrap()).as_deref(),
        Some("NodeClassDrift")
    );
    // Upstream's hash (another version) is not compared.
    let upstream = karpenter_core::ports::DriftCheck {
        node_class_hash: Some(karpenter_core::ports::NodeClassHash {
            hash: "1".into(),
            version: "v4".into(),
        }),
        ..check.clone()
    };
    assert_eq!(reason(cloud.drift(&upstream).await.unwrap()), None);

    // The subnet it runs in is no longer selected.
    let other_subnet = fixture
        .subnets
        .values()
        .find(|s| *s != subnet)
        .unwrap()
        .clone();
    let mut class = fixture.node_class("default");
    class.spec.subnet_selector_terms =
        serde_json::from_value(serde_json::json!([{"id": other_subnet}])).unwrap();
    cloud.set_node_class(class);
    let unstamped = karpenter_core::ports::DriftCheck {
        node_class_hash: None,
        ..check.clone()
    };
    assert_eq!(
        reason(cloud.drift(&unstamped).await.unwrap()).as_deref(),
        Some("SubnetDrift")
    );

    // Another security group is selected.
    let vpc = direct
        .ec2
        .describe_subnets()
        .subnet_ids(subnet)
        .send()
        .await
        .unwrap()
        .subnets()[0]
        .vpc_id()
        .unwrap()
        .to_owned();
    // The instance carries the launch template's groups, as EC2 puts them on it (moto
    // through scripts/moto_server.py).
    let reported = direct
        .ec2
        .describe_instances()
        .instance_ids(&check.instance.id)
        .send()
        .await
        .unwrap();
    let groups: Vec<&str> = reported.reservations()[0].instances()[0]
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    assert_eq!(groups, [fixture.security_group.as_str()]);
    assert_eq!(
        reason(cloud.drift(&unstamped).await.unwrap()).as_deref(),
        Some("SubnetDrift")
    );
    cloud.set_node_class(fixture.node_class("default"));
    assert_eq!(reason(cloud.drift(&unstamped).await.unwrap()), None);
    let group = direct
        .ec2
        .create_security_group()
        .group_name("other-nodes")
        .description("another group")
        .vpc_id(vpc)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_owned();
    let mut class = fixture.node_class("default");
    class.spec.security_group_selector_terms =
        serde_json::from_value(serde_json::json!([{"id": group}])).unwrap();
    cloud.set_node_class(class);
    assert_eq!(
        reason(cloud.drift(&unstamped).await.unwrap()).as_deref(),
        Some("SecurityGroupDrift")
    );
}

/// Without NodeOverlays EC2 picks the cheapest override (lowest-price); with them the
/// NodeClaim's own order wins (the prioritized strategy, as upstream): m5.xlarge first is
/// launched although m5.large costs less. Each launch says where its price came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlaid_launch_follows_the_nodeclaims_order_not_ec2_prices() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (_direct, _fixture, cloud) = setup(moto, &moto.endpoint()).await;
    let plain = request("default-plain", &["m5.xlarge", "m5.large"], "on-demand");
    let instance = cloud.create(&plain).await.unwrap();
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(
        instance.price_source.as_deref(),
        Some("on-demand price from the embedded price table")
    );
    let overlaid = LaunchRequest {
        overlaid: true,
        ..request("default-overlaid", &["m5.xlarge", "m5.large"], "on-demand")
    };
    let instance = cloud.create(&overlaid).await.unwrap();
    assert_eq!(instance.instance_type, "m5.xlarge");
}
