//! The scenario's timeline steps as the running simulation carries them out: scaling and
//! jobs, static NodePools scaled, manifests applied mid-run, image releases, NodeClaims deleted by hand and
//! interruption notices.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_actors::handles::System;
use karpenter_core::api::NodePool;
use tokio::time::Instant;
use tracing::{info, warn};

use super::backend::Backend;
use super::cluster::SimCluster;
use super::scenario::Action;

/// What timeline steps act on, and what they remember between steps.
pub(super) struct Steps<'a> {
    pub(super) cloud: &'a dyn Backend,
    pub(super) cluster: &'a SimCluster,
    pub(super) system: &'a System,
    /// Interrupted instances the cloud takes back, and when.
    pub(super) reclaims: Vec<(Instant, String)>,
    /// Each NodePool as last applied.
    pub(super) pools: BTreeMap<String, NodePool>,
}

impl Steps<'_> {
    /// Tells the NodePools of `class` (all when `None`) that it changed, so their NodeClaims
    /// judge their drift again.
    fn node_class_changed(&self, class: Option<&str>) {
        for (pool, object) in &self.pools {
            if class.is_none_or(|c| c == object.spec.template.spec.node_class_ref.name)
                && let Some(handle) = self.system.nodepool(pool)
            {
                let _ = handle.node_class_changed();
            }
        }
    }

    /// Carries out one step at `now`.
    pub(super) async fn apply(&mut self, action: &Action, now: Instant) -> anyhow::Result<()> {
        let (cloud, cluster, system) = (self.cloud, self.cluster, self.system);
        match action {
            Action::Scale {
                deployment,
                replicas,
            } => {
                info!(deployment, replicas, "Scaling.");
                cluster.scale(deployment, None, *replicas);
                // A buffer may be a percentage of it.
                self.system.scheduler().buffers_changed()?;
            }
            Action::Job(job) => {
                info!(job = %job.name, pods = job.replicas, "Starting job.");
                cluster.add_job(
                    &job.name,
                    &job.pod()?,
                    job.replicas,
                    job.run_for.unwrap_or_default(),
                );
            }
            Action::Apply(apply) => {
                for class in &apply.nodeclasses {
                    let name = class.metadata.name.as_deref().unwrap_or_default();
                    info!(nodeclass = name, "Applying an EC2NodeClass.");
                    cloud.apply_node_class(class);
                    self.node_class_changed(Some(name));
                }
                for pool in &apply.nodepools {
                    let name = pool.metadata.name.clone().unwrap_or_default();
                    info!(nodepool = %name, "Applying a NodePool.");
                    self.pools.insert(name, pool.clone());
                    system.apply_nodepool(pool.clone())?;
                }
            }
            Action::ScaleNodePool { nodepool, replicas } => {
                // `kubectl scale nodepool/<name> --replicas=<n>`: the scale subresource
                // sets spec.replicas and nothing else.
                let Some(pool) = self.pools.get_mut(nodepool) else {
                    anyhow::bail!("scaleNodePool: no NodePool named {nodepool:?}");
                };
                info!(%nodepool, replicas, "Scaling a static NodePool.");
                pool.spec.replicas = Some(*replicas);
                system.apply_nodepool(pool.clone())?;
            }
            Action::AmiRelease { node_class } => {
                for (class, image) in cloud.release_image(node_class.as_deref()).await? {
                    info!(nodeclass = %class, %image, "A new image is released.");
                    self.node_class_changed(Some(&class));
                }
            }
            Action::DeleteNodeClaim { nodepool, count } => {
                self.delete_nodeclaims(nodepool, *count).await?;
            }
            Action::Interrupt {
                nodepool,
                count,
                kind,
            } => self.interrupt(nodepool, *count, *kind, now).await?,
            Action::NodeCondition {
                nodepool,
                count,
                type_,
                status,
            } => self.node_condition(nodepool, *count, type_, status).await,
        }
        Ok(())
    }

    /// The running instances of `nodepool`, oldest first (then by id).
    async fn oldest_running(&self, nodepool: &str) -> Vec<karpenter_core::ports::Instance> {
        let mut running: Vec<_> = self
            .cloud
            .running()
            .await
            .into_iter()
            .filter(|i| i.nodepool == nodepool)
            .collect();
        running.sort_by(|a, b| {
            a.launched_at_ms
                .cmp(&b.launched_at_ms)
                .then(a.id.cmp(&b.id))
        });
        running
    }

    /// Makes `type_` hold at `status` on the oldest `count` running nodes of `nodepool` that
    /// do not hold it already.
    async fn node_condition(&self, nodepool: &str, count: usize, type_: &str, status: &str) {
        let mut done = 0;
        for instance in self.oldest_running(nodepool).await {
            if done == count {
                break;
            }
            if self
                .cluster
                .holds_condition(&instance.provider_id, type_, status)
            {
                continue;
            }
            if let Some(node) = self.cluster.node_of(&instance.provider_id)
                && self.cluster.set_condition(&node, type_, status)
            {
                info!(%node, nodeclaim = %instance.nodeclaim, condition = type_, status, "A node turns unhealthy.");
                done += 1;
            }
        }
        if done < count {
            warn!(
                nodepool,
                wanted = count,
                found = done,
                "Fewer nodes to make unhealthy than the scenario asks for."
            );
        }
    }

    /// `kubectl delete nodeclaim` on the oldest `count` running NodeClaims of `nodepool`.
    async fn delete_nodeclaims(&self, nodepool: &str, count: usize) -> anyhow::Result<()> {
        let running = self.oldest_running(nodepool).await;
        if running.len() < count {
            warn!(
                nodepool,
                wanted = count,
                found = running.len(),
                "Fewer NodeClaims to delete than the scenario asks for."
            );
        }
        let now_ms = self.system.context().journal.now_ms();
        for instance in running.into_iter().take(count) {
            if let Some(actor) = self.system.nodeclaim(&instance.nodeclaim) {
                info!(nodeclaim = %instance.nodeclaim, "Deleting a NodeClaim by hand.");
                actor.deleted(Some(now_ms))?;
            }
        }
        Ok(())
    }

    /// Capacity Block `id` started expiring at `at`: its nodes are drained and replaced, as
    /// upstream's capacity reservation expiration controller deletes their NodeClaims, and
    /// EC2 takes the instances back 10 minutes later (30 minutes before the block ends).
    pub(super) async fn capacity_block_expiring(
        &mut self,
        id: &str,
        at: Instant,
    ) -> anyhow::Result<()> {
        let kind = karpenter_core::ports::InterruptionKind::CapacityBlockExpiring;
        let running = self.cloud.running().await;
        let inside =
            (running.into_iter()).filter(|i| i.reservation.as_ref().is_some_and(|r| r.id == id));
        for instance in inside {
            info!(instance.id = %instance.id, nodeclaim = %instance.nodeclaim, reservation = id, "Its Capacity Block is expiring: draining the node.");
            self.system
                .interruption()
                .notice(instance.id.clone(), kind)?;
            self.reclaims
                .push((at + Duration::from_secs(10 * 60), instance.id));
        }
        Ok(())
    }

    async fn interrupt(
        &mut self,
        nodepool: &str,
        count: usize,
        kind: karpenter_core::ports::InterruptionKind,
        now: Instant,
    ) -> anyhow::Result<()> {
        let mut candidates: Vec<_> = self
            .cloud
            .running()
            .await
            .into_iter()
            .filter(|i| {
                i.nodepool == nodepool
                    && (kind != karpenter_core::ports::InterruptionKind::SpotInterrupted
                        || i.capacity_type == karpenter_core::model::CapacityType::Spot)
            })
            .collect();
        candidates.sort_by(|a, b| a.id.cmp(&b.id));
        if candidates.len() < count {
            warn!(
                nodepool,
                wanted = count,
                found = candidates.len(),
                "Fewer instances to interrupt than the scenario asks for."
            );
        }
        for instance in candidates.into_iter().take(count) {
            info!(instance.id = %instance.id, nodeclaim = %instance.nodeclaim, ?kind, "Interrupting.");
            if !self.cloud.send_interruption(&instance, kind).await? {
                self.system
                    .interruption()
                    .notice(instance.id.clone(), kind)?;
            }
            // A spot instance is taken back two minutes after its warning.
            self.reclaims
                .push((now + Duration::from_secs(120), instance.id));
        }
        Ok(())
    }
}
