//! SDK configuration: region, credentials, endpoint override and retries.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;

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
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                // SQS long polls hold the call open for 20 s.
                .operation_attempt_timeout(Duration::from_secs(40))
                .build(),
        );
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

/// EC2, SSM and SQS clients sharing one configuration.
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
}

impl Clients {
    /// Builds the clients.
    pub async fn connect(connection: &Connection) -> Self {
        let config = sdk_config(connection).await;
        Clients {
            ec2: aws_sdk_ec2::Client::new(&config),
            ssm: aws_sdk_ssm::Client::new(&config),
            sqs: aws_sdk_sqs::Client::new(&config),
            iam: aws_sdk_iam::Client::new(&config),
        }
    }
}
