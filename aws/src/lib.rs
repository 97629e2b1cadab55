//! The AWS side of karpenter-rs, and the only crate that uses the AWS SDK (so that edits
//! elsewhere never recompile it): the EC2 [`CloudProvider`](karpenter_core::ports::CloudProvider)
//! ([`provider::AwsCloud`]), EC2NodeClass resolution ([`nodeclass`]), the instance-type
//! catalog and prices ([`pricing`]: the Pricing API), the SQS interruption queue ([`sqs::SqsQueue`]), and the reader of the
//! Auto Scaling groups a migration from Cluster Autoscaler starts from ([`autoscaling`]).
//! Pure decisions live in [`selection`], [`bootstrap`], [`drift`] and [`messages`], tested
//! without any network; [`emulator`] prepares an empty emulator for a run, and [`testing`]
//! (for tests and campaigns) starts moto and injects faults. It is compiled in every build,
//! not behind a feature: a feature only the tests turned on made them compile this crate and
//! every crate above it a second time.

pub mod autoscaling;
pub mod batcher;
pub mod bootstrap;
pub mod cluster;
pub mod config;
pub mod drift;
pub mod ec2;
pub mod emulator;
pub mod error;
pub mod history;
pub mod iam;
pub mod launch;
/// The interruption queue's EventBridge messages (parsed in the core: pure, fuzzed there).
pub use karpenter_core::eventbridge as messages;
pub mod nodeclass;
pub mod pricing;
pub mod provider;
pub mod reservations;
pub mod selection;
pub mod sqs;
pub mod testing;

/// Every AWS API action the controller calls, as IAM names them; the policy in
/// `deploy/aws/cloudformation.yaml` must grant each (a test checks).
pub const REQUIRED_PERMISSIONS: &[&str] = &[
    "ec2:CreateFleet",
    "ec2:RunInstances",
    "ec2:CreateLaunchTemplate",
    "ec2:CreateTags",
    "ec2:DeleteLaunchTemplate",
    "ec2:TerminateInstances",
    "ec2:DescribeImages",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
    "pricing:GetProducts",
    "ssm:GetParameter",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "iam:PassRole",
    "iam:GetInstanceProfile",
    "iam:CreateInstanceProfile",
    "iam:TagInstanceProfile",
    "eks:DescribeCluster",
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
];
