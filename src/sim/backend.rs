//! What the simulation loop needs from its cloud beyond the `CloudProvider` port: who owns
//! an instance, what is running, and taking an instance back after an interruption. The
//! in-memory [`SimCloud`] and the [`AwsBackend`](super::aws::AwsBackend) (EC2 or an emulator
//! of it) both provide it.

use std::sync::Arc;

use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::InstanceType;
use karpenter_core::ports::InterruptionKind;
use karpenter_core::ports::{BoxFuture, CloudProvider, Instance};

use crate::simcloud::SimCloud;

/// A cloud the simulation can drive.
pub trait Backend: CloudProvider {
    /// The NodeClaim a running instance was launched for.
    fn owner_of(&self, instance_id: &str) -> Option<String>;
    /// Running instances launched for this cluster.
    fn running(&self) -> BoxFuture<'_, Vec<Instance>>;
    /// Instances launched and terminated so far by this run.
    fn counts(&self) -> (u64, u64);
    /// An instance type by name.
    fn instance_type(&self, name: &str) -> Option<Arc<InstanceType>>;
    /// Puts back instances a stopped run left running (a no-op for a real cloud, which kept
    /// them).
    fn restore(&self, instances: &[Instance]);
    /// Delivers an interruption notice the way this cloud does (a direct notice to the
    /// interruption actor, or a message on the SQS queue); `true` when the backend sent it
    /// itself.
    fn send_interruption<'a>(
        &'a self,
        instance: &'a Instance,
        kind: InterruptionKind,
    ) -> BoxFuture<'a, anyhow::Result<bool>>;
    /// The cloud takes an interrupted instance back.
    fn reclaim<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Option<Instance>>;
    /// An EC2NodeClass was created or changed.
    fn apply_node_class(&self, node_class: &EC2NodeClass);
    /// A new image is released for a node class (every one when `None`); returns each node
    /// class with its new image, or why this cloud cannot.
    fn release_image<'a>(
        &'a self,
        node_class: Option<&'a str>,
    ) -> BoxFuture<'a, anyhow::Result<Vec<(String, String)>>>;
}

impl Backend for SimCloud {
    fn owner_of(&self, instance_id: &str) -> Option<String> {
        SimCloud::owner_of(self, instance_id)
    }

    fn running(&self) -> BoxFuture<'_, Vec<Instance>> {
        Box::pin(async move { SimCloud::running(self) })
    }

    fn counts(&self) -> (u64, u64) {
        SimCloud::counts(self)
    }

    fn instance_type(&self, name: &str) -> Option<Arc<InstanceType>> {
        SimCloud::instance_type(self, name)
    }

    fn restore(&self, instances: &[Instance]) {
        SimCloud::restore(self, instances);
    }

    fn send_interruption<'a>(
        &'a self,
        _instance: &'a Instance,
        _kind: InterruptionKind,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(async { Ok(false) })
    }

    fn reclaim<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Option<Instance>> {
        Box::pin(async move { SimCloud::reclaim(self, instance_id) })
    }

    fn apply_node_class(&self, node_class: &EC2NodeClass) {
        self.set_node_class(node_class);
    }

    fn release_image<'a>(
        &'a self,
        node_class: Option<&'a str>,
    ) -> BoxFuture<'a, anyhow::Result<Vec<(String, String)>>> {
        Box::pin(async move { Ok(SimCloud::release_image(self, node_class)) })
    }
}
