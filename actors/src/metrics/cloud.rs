//! The cloud as one controller calls it: every call is timed into
//! `karpenter_cloudprovider_duration_seconds{controller, method, provider}`, the method named
//! as upstream names it.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use karpenter_core::model::InstanceType;
use karpenter_core::ports::{
    CloudError, CloudProvider, Drift, DriftCheck, Instance, LaunchRequest,
};

use super::Metrics;

/// The cloud, timed for `controller` (`nodeclaim.lifecycle`, `provisioner`, …).
pub struct MeasuredCloud<'a> {
    cloud: &'a dyn CloudProvider,
    metrics: &'a Metrics,
    controller: &'static str,
}

impl<'a> MeasuredCloud<'a> {
    /// `cloud` timed into `metrics` for `controller`.
    pub fn new(
        cloud: &'a dyn CloudProvider,
        metrics: &'a Metrics,
        controller: &'static str,
    ) -> Self {
        MeasuredCloud {
            cloud,
            metrics,
            controller,
        }
    }

    async fn timed<T>(&self, method: &'static str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = call.await;
        self.metrics.cloud_call(
            self.controller,
            method,
            self.cloud.provider_name(),
            started.elapsed().as_secs_f64(),
        );
        out
    }

    /// [`CloudProvider::create`].
    pub async fn create(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        self.timed("Create", self.cloud.create(request)).await
    }

    /// [`CloudProvider::delete`].
    pub async fn delete(&self, instance_id: &str) -> Result<(), CloudError> {
        self.timed("Delete", self.cloud.delete(instance_id)).await
    }

    /// [`CloudProvider::get`].
    pub async fn get(&self, instance_id: &str) -> Result<Instance, CloudError> {
        self.timed("Get", self.cloud.get(instance_id)).await
    }

    /// [`CloudProvider::list`].
    pub async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.timed("List", self.cloud.list()).await
    }

    /// [`CloudProvider::instance_types`].
    pub async fn instance_types(
        &self,
        node_class: &str,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.timed("GetInstanceTypes", self.cloud.instance_types(node_class))
            .await
    }

    /// [`CloudProvider::drift`].
    pub async fn drift(&self, check: &DriftCheck) -> Result<Option<Drift>, CloudError> {
        self.timed("IsDrifted", self.cloud.drift(check)).await
    }
}
