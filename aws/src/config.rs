//! SDK configuration: region, credentials, endpoint override, retries, timeouts, and an
//! observer that sees every retry and failed attempt (for metrics).

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::RequestAttempts;

/// How to reach AWS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Region (`AWS_REGION`).
    pub region: String,
    /// Endpoint override for every service, for emulators (`--aws-endpoint`).
    pub endpoint: Option<String>,
    /// Static credentials `(access key, secret)`. `None` uses the default chain (env,
    /// web identity / IRSA, Pod Identity, instance profile).
    pub static_credentials: Option<(String, String)>,
    /// Attempts per call, including the first; throttling (`RequestLimitExceeded`,
    /// `Throttling`, …), 5xx and transient network errors are retried with jittered
    /// exponential backoff.
    pub max_attempts: u32,
    /// First backoff.
    pub initial_backoff: Duration,
}

impl Connection {
    /// Defaults for a region.
    pub fn new(region: &str) -> Self {
        Connection {
            region: region.to_owned(),
            endpoint: None,
            static_credentials: None,
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
        }
    }
}

/// Connect within 5 s, answer each attempt within `attempt` seconds, finish the call with
/// its retries within `total` seconds.
fn timeouts(attempt: u64, total: u64) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(attempt))
        .operation_timeout(Duration::from_secs(total))
        .build()
}

/// API calls (EC2, SSM, IAM): 20 s per attempt, 90 s in all, so that a hung endpoint holds
/// no launch for long.
fn api_timeouts() -> TimeoutConfig {
    timeouts(20, 90)
}

/// SQS calls: a long poll holds the call open for 20 s.
fn queue_timeouts() -> TimeoutConfig {
    timeouts(40, 150)
}

/// An attempt of an AWS call that was not a plain success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEvent {
    /// An attempt after the first: the SDK backed off and tried again.
    Retry,
    /// An attempt failed: `timeout`, `connection` (refused, reset, dropped), `server` (5xx,
    /// which includes EC2's `RequestLimitExceeded` throttling), `client` (4xx, which
    /// includes SQS's and SSM's throttling) or `other`.
    Failed(&'static str),
}

/// Told of every retry and failed attempt, with the service and operation (`EC2`,
/// `CreateFleet`).
pub type AttemptObserver = Arc<dyn Fn(&str, &str, AttemptEvent) + Send + Sync>;

/// The SDK interceptor that tells an [`AttemptObserver`].
#[derive(Clone)]
struct Observe(AttemptObserver);

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observe")
    }
}

impl Observe {
    fn tell(&self, cfg: &ConfigBag, event: AttemptEvent) {
        if let Some(metadata) = cfg.load::<Metadata>() {
            (self.0)(metadata.service(), metadata.name(), event);
        }
    }
}

impl Intercept for Observe {
    fn name(&self) -> &'static str {
        "karpenter-attempt-observer"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg
            .load::<RequestAttempts>()
            .is_some_and(|a| a.attempts() > 1)
        {
            self.tell(cfg, AttemptEvent::Retry);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Err(error)) = context.output_or_error() else {
            return Ok(());
        };
        let status = context.response().map(|r| r.status().as_u16());
        let kind = if error.is_timeout_error() {
            "timeout"
        } else if error.is_connector_error() || error.is_response_error() {
            "connection"
        } else {
            match status {
                Some(500..) => "server",
                Some(400..=499) => "client",
                _ => "other",
            }
        };
        self.tell(cfg, AttemptEvent::Failed(kind));
        Ok(())
    }
}

/// The shared SDK configuration for EC2, SSM and SQS clients.
pub async fn sdk_config(connection: &Connection) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new(connection.region.clone()))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(connection.max_attempts)
                .with_initial_backoff(connection.initial_backoff)
                .with_max_backoff(Duration::from_secs(20)),
        )
        .timeout_config(api_timeouts());
    if let Some(endpoint) = &connection.endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some((key, secret)) = &connection.static_credentials {
        loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
            key.clone(),
            secret.clone(),
            None,
            None,
            "static",
        ));
    }
    loader.load().await
}

/// The AWS clients (EC2, SSM, SQS, IAM, EKS, Pricing) sharing one configuration.
#[derive(Debug, Clone)]
pub struct Clients {
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// SSM.
    pub ssm: aws_sdk_ssm::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// IAM (instance profiles for node classes that name a role).
    pub iam: aws_sdk_iam::Client,
    /// EKS (the cluster's endpoint, CA, service CIDR and version: [`crate::cluster`]).
    pub eks: aws_sdk_eks::Client,
    /// The Pricing API, at the endpoint that serves the region
    /// ([`crate::pricing::endpoint_region`]).
    pub pricing: aws_sdk_pricing::Client,
}

impl Clients {
    /// Builds the clients.
    pub async fn connect(connection: &Connection) -> Self {
        Clients::connect_observed(connection, None).await
    }

    /// Builds the clients; `observer` is told of every retry and failed attempt.
    pub async fn connect_observed(
        connection: &Connection,
        observer: Option<AttemptObserver>,
    ) -> Self {
        let config = sdk_config(connection).await;
        let observe = observer.map(Observe);
        macro_rules! client {
            ($sdk:ident, $timeouts:expr) => {{
                let mut builder = $sdk::config::Builder::from(&config).timeout_config($timeouts);
                if let Some(observe) = &observe {
                    builder = builder.interceptor(observe.clone());
                }
                $sdk::Client::from_conf(builder.build())
            }};
        }
        Clients {
            ec2: client!(aws_sdk_ec2, api_timeouts()),
            ssm: client!(aws_sdk_ssm, api_timeouts()),
            sqs: client!(aws_sdk_sqs, queue_timeouts()),
            iam: client!(aws_sdk_iam, api_timeouts()),
            eks: client!(aws_sdk_eks, api_timeouts()),
            pricing: {
                let region = crate::pricing::endpoint_region(&connection.region);
                let mut builder = aws_sdk_pricing::config::Builder::from(&config)
                    .region(aws_config::Region::new(region))
                    .timeout_config(api_timeouts());
                if let Some(observe) = &observe {
                    builder = builder.interceptor(observe.clone());
                }
                aws_sdk_pricing::Client::from_conf(builder.build())
            },
        }
    }
}
