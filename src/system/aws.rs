//! The EC2 wiring both `simulate --cloud aws` and `controller --cloud aws` start from: the
//! clients, an emulator prepared if asked, the provider with its launch-template upkeep, and
//! the interruption queue.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_aws::provider::AwsCloud;
use karpenter_aws::sqs::SqsQueue;

/// How to reach the EC2 API and what to prepare there (`--cloud aws`, for `simulate` and
/// `controller`).
#[derive(Debug, Clone)]
pub struct AwsSetup {
    /// Region, endpoint, credentials.
    pub connection: karpenter_aws::config::Connection,
    /// Provider settings (AMI lookup, …); its cluster and Kubernetes version are filled in
    /// by [`open`] from `cluster`.
    pub settings: karpenter_aws::provider::AwsSettings,
    /// The cluster as the flags (and, in a pod, the ServiceAccount and the API server) give
    /// it; what is missing is asked of EKS ([`karpenter_aws::cluster`]).
    pub cluster: karpenter_aws::cluster::KnownCluster,
    /// SQS queue for interruptions (`--interruption-queue`); the scenario's interruptions are
    /// sent to it as EventBridge messages.
    pub interruption_queue: Option<String>,
    /// Create the VPC, tagged subnets and security group, AMI parameters and the queue first
    /// (for an empty emulator).
    pub prepare_emulator: bool,
    /// Never call the Pricing API (`--isolated-vpc`): on-demand prices from the embedded
    /// table only.
    pub isolated_vpc: bool,
}

/// The AWS side of a run or a controller: the provider and, when configured, the
/// interruption queue.
pub struct AwsParts {
    /// The provider (its upkeep task runs until it is dropped).
    pub provider: Arc<AwsCloud>,
    /// The interruption queue (`--interruption-queue`).
    pub queue: Option<SqsQueue>,
    /// The clients, for callers that create or inspect resources.
    pub clients: karpenter_aws::config::Clients,
}

/// Connects to the EC2 API: prepares an emulator if asked, completes the cluster's settings
/// (`eks:DescribeCluster` for what was not given), builds the provider (with its launch
/// template upkeep) and opens the interruption queue. Retries and failed attempts of every
/// call go to `metrics`.
pub async fn open(
    aws: &AwsSetup,
    metrics: &Arc<karpenter_actors::metrics::Metrics>,
) -> anyhow::Result<AwsParts> {
    let observer: karpenter_aws::config::AttemptObserver = {
        let metrics = metrics.clone();
        Arc::new(move |service, operation, event| match event {
            karpenter_aws::config::AttemptEvent::Retry => metrics.cloud_retry(service, operation),
            karpenter_aws::config::AttemptEvent::Failed(kind) => {
                metrics.cloud_attempt_error(service, operation, kind)
            }
        })
    };
    let clients =
        karpenter_aws::config::Clients::connect_observed(&aws.connection, Some(observer)).await;
    let mut settings = aws.settings.clone();
    if aws.prepare_emulator {
        let lookup = karpenter_aws::nodeclass::AmiLookup {
            ssm_prefix: settings.ami_lookup.ssm_prefix.clone(),
            kubernetes_version: aws
                .cluster
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| karpenter_aws::emulator::KUBERNETES_VERSION.to_owned()),
        };
        let fixture =
            karpenter_aws::emulator::Fixture::create_with(&clients, &aws.cluster.name, &lookup)
                .await
                .context(
                    "cannot prepare the emulator (VPC, subnets, security group, AMI parameters)",
                )?;
        tracing::info!(subnets = ?fixture.subnets, security_group = %fixture.security_group, "Emulator prepared.");
        if let Some(name) = &aws.interruption_queue {
            karpenter_aws::emulator::create_queue(&clients, name)
                .await
                .context("cannot create the interruption queue")?;
        }
    }
    let cluster = karpenter_aws::cluster::resolve(&clients.eks, aws.cluster.clone()).await?;
    tracing::info!(
        cluster = %cluster.info.name,
        endpoint = %cluster.info.endpoint,
        service_cidr = cluster.info.service_cidr.as_deref().unwrap_or_default(),
        kubernetes_version = %cluster.kubernetes_version,
        "Cluster discovered."
    );
    settings.cluster = cluster.info;
    settings.ami_lookup.kubernetes_version = cluster.kubernetes_version;
    let mut provider = AwsCloud::new(
        clients.ec2.clone(),
        clients.ssm.clone(),
        clients.iam.clone(),
        settings,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let region = &aws.settings.region;
    if !aws.isolated_vpc && karpenter_aws::pricing::has_pricing_api(region) {
        provider = provider.with_pricing(karpenter_aws::pricing::PricingApi::new(
            clients.pricing.clone(),
            region,
        ));
    }
    let provider = Arc::new(provider);
    // Both stop by themselves when the provider is dropped.
    let _upkeep = provider.start_upkeep(Duration::from_secs(60), Duration::from_secs(600));
    let _pricing = provider.start_pricing();
    let queue = match &aws.interruption_queue {
        Some(name) => Some(
            SqsQueue::connect(
                clients.sqs.clone(),
                name,
                karpenter_aws::sqs::Polling::default(),
            )
            .await
            .with_context(|| format!("--interruption-queue {name:?}"))?,
        ),
        None => None,
    };
    Ok(AwsParts {
        provider,
        queue,
        clients,
    })
}
