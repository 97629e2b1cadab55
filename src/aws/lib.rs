//! The AWS side of karpenter-rs, and the only crate that uses the AWS SDK (so that edits
//! elsewhere never recompile it): the EC2 [`CloudProvider`](karpenter_actors::ports::CloudProvider)
//! ([`provider::AwsCloud`]), EC2NodeClass resolution ([`nodeclass`]), the instance-type
//! catalog and prices, and the SQS interruption queue ([`sqs::SqsQueue`]). Pure decisions
//! live in [`selection`], [`bootstrap`] and [`messages`], tested without any network.

pub mod batcher;
pub mod bootstrap;
pub mod config;
pub mod ec2;
pub mod error;
pub mod iam;
pub mod launch;
pub mod messages;
pub mod nodeclass;
pub mod provider;
pub mod selection;
pub mod sqs;
pub mod testing;
