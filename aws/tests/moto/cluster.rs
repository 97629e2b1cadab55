//! The cluster nodes join, discovered through `eks:DescribeCluster` on moto's EKS: endpoint,
//! CA, service CIDR and version read back, flags taking precedence over what EKS answers, an
//! unknown cluster refused naming the flags that would do without EKS, and the AL2023 user
//! data of a launch carrying everything nodeadm requires; a control-plane upgrade moves
//! `al2023@latest` to the new version's images and drifts the nodes on the old ones.

use super::*;
use karpenter_aws::cluster::{ClusterError, KnownCluster, resolve};
use karpenter_aws::emulator::SERVICE_CIDR;

fn named(name: &str) -> KnownCluster {
    KnownCluster {
        name: name.into(),
        ..KnownCluster::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_discovered_and_its_nodes_get_what_nodeadm_needs() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, _cloud) = setup(moto, &moto.endpoint()).await;

    let resolved = resolve(&direct.eks, named(CLUSTER)).await.unwrap();
    assert_eq!(resolved.info.name, CLUSTER);
    assert!(
        resolved.info.endpoint.starts_with("https://"),
        "{resolved:?}"
    );
    let ca = resolved.info.ca_bundle.clone().expect("a CA bundle");
    assert!(!ca.is_empty());
    assert_eq!(resolved.info.service_cidr.as_deref(), Some(SERVICE_CIDR));
    assert_eq!(resolved.kubernetes_version, KUBERNETES_VERSION);

    // What a flag gives wins over what EKS says; the rest is still read.
    let flagged = KnownCluster {
        endpoint: Some("https://flag.example".into()),
        kubernetes_version: Some("1.31".into()),
        ..named(CLUSTER)
    };
    let mixed = resolve(&direct.eks, flagged).await.unwrap();
    assert_eq!(mixed.info.endpoint, "https://flag.example");
    assert_eq!(mixed.kubernetes_version, "1.31");
    assert_eq!(mixed.info.ca_bundle.as_deref(), Some(ca.as_str()));
    assert_eq!(mixed.info.service_cidr.as_deref(), Some(SERVICE_CIDR));

    // A cluster EKS does not know: refused, naming what to check and what to give instead.
    let missing = resolve(&direct.eks, named("not-there")).await.unwrap_err();
    assert!(
        matches!(missing, ClusterError::NotFound { .. }),
        "{missing:?}"
    );
    let message = missing.to_string();
    for part in [
        "not-there",
        "--cluster-name",
        "--cluster-endpoint",
        "--cluster-ca-bundle",
        "--cluster-cidr",
        "--kubernetes-version",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }

    // A launch with the discovered cluster writes a complete NodeConfig.
    let mut settings = settings();
    settings.cluster = resolved.info.clone();
    let cloud = AwsCloud::new(
        direct.ec2.clone(),
        direct.ssm.clone(),
        direct.iam.clone(),
        settings,
    )
    .unwrap();
    cloud.set_node_class(fixture.node_class("default"));
    cloud
        .create(&request("default-join1", &["m5.large"], "on-demand"))
        .await
        .unwrap();
    let names = karpenter_aws::testing::launch_template_names(&direct, CLUSTER)
        .await
        .unwrap();
    let versions = direct
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&names[0])
        .send()
        .await
        .unwrap();
    let encoded = versions.launch_template_versions()[0]
        .launch_template_data()
        .and_then(|d| d.user_data())
        .unwrap();
    use base64::Engine as _;
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap();
    for line in [
        "kind: NodeConfig".to_owned(),
        format!("name: {}", json(CLUSTER)),
        format!("apiServerEndpoint: {}", json(&resolved.info.endpoint)),
        format!("certificateAuthority: {}", json(&ca)),
        format!("cidr: {}", json(SERVICE_CIDR)),
    ] {
        assert!(user_data.contains(&line), "{line}: {user_data}");
    }
}

/// A YAML scalar as the NodeConfig writes it (a JSON string).
fn json(value: &str) -> String {
    serde_json::to_string(value).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_describe_cluster_names_the_permission_and_the_flags() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let proxy = FaultProxy::start(moto.addr()).await;
    let (_direct, _fixture, _cloud) = setup(moto, &moto.endpoint()).await;
    let through = Clients::connect(&connection(&proxy.endpoint())).await;
    proxy.inject(Fault::rest_json_error(
        "DescribeCluster",
        403,
        "AccessDeniedException",
        None,
    ));
    let known = KnownCluster {
        endpoint: Some("https://flag.example".into()),
        ..named(CLUSTER)
    };
    let denied = resolve(&through.eks, known.clone()).await.unwrap_err();
    assert!(matches!(denied, ClusterError::Denied { .. }), "{denied:?}");
    let message = denied.to_string();
    for part in [
        "eks:DescribeCluster",
        "--cluster-ca-bundle",
        "--cluster-cidr",
        "--kubernetes-version",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(
        !message.contains("--cluster-endpoint"),
        "a flag already given is not asked for: {message}"
    );
    assert_eq!(proxy.injected("DescribeCluster"), 1);
    // Everything given: EKS is not asked at all.
    let complete = KnownCluster {
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("172.20.0.0/16".into()),
        kubernetes_version: Some("1.32".into()),
        ..known
    };
    let resolved = resolve(&through.eks, complete).await.unwrap();
    assert_eq!(resolved.info.service_cidr.as_deref(), Some("172.20.0.0/16"));
    assert_eq!(proxy.hits("DescribeCluster"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_upgrade_moves_al2023_latest_and_drifts_the_nodes() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    let (direct, fixture, cloud) = setup(moto, &moto.endpoint()).await;
    let instance = (cloud
        .create(&request("default-upgrade", &["m5.large"], "on-demand"))
        .await)
        .unwrap();
    let check = karpenter_core::ports::DriftCheck {
        nodeclaim: "default-upgrade".into(),
        node_class: "default".into(),
        instance,
        node_class_hash: cloud.node_class_hash("default"),
    };
    let reason = |d: Option<karpenter_core::ports::Drift>| d.map(|d| d.reason);
    assert_eq!(reason(cloud.drift(&check).await.unwrap()), None);

    // The next minor version's recommended image is another one.
    let minor: u32 = KUBERNETES_VERSION
        .split('.')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let next = format!("1.{}", minor + 1);
    let images = (direct.ec2.describe_images().owners("amazon"))
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let newer = (images.images().iter())
        .filter_map(|i| i.image_id())
        .find(|id| *id != fixture.amis["x86_64"])
        .unwrap()
        .to_owned();
    (direct.ssm.put_parameter())
        .name(format!(
            "{SSM_PREFIX}/eks/optimized-ami/{next}/amazon-linux-2023/x86_64/standard/recommended/image_id"
        ))
        .value(&newer)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();

    // The same version read again changes nothing.
    assert!(!cloud.set_kubernetes_version(KUBERNETES_VERSION));
    assert_eq!(reason(cloud.drift(&check).await.unwrap()), None);

    assert!(cloud.set_kubernetes_version(&next));
    assert_eq!(cloud.kubernetes_version(), next);
    let resolved = cloud.resolve("default").await.unwrap();
    let ids: Vec<&str> = resolved.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec![newer.as_str()], "{next}'s images only");
    assert_eq!(
        reason(cloud.drift(&check).await.unwrap()).as_deref(),
        Some("AMIDrift")
    );
}
