//! Resuming a stopped simulation from its journal: the instances that were running come
//! back with their nodes, their NodeClaims are adopted in their recorded states, and
//! NodeClaims that had not launched are closed so their pods are planned again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_actors::actor::Context;
use karpenter_actors::handles::System;
use karpenter_core::api::NodePool;
use karpenter_core::events::{ClusterView, DomainEvent, NodeClaimPlan, NodeClaimState};
use karpenter_core::recovery::{Adopt, RecoveryPlan};
use karpenter_journal::Journal;
use tracing::{info, warn};

use super::super::backend::Backend;
use super::super::cluster::SimCluster;
use super::SIM_EPOCH_MS;

/// How far a journal got: the simulated time of its last event; `None` when it holds no
/// event (the run stopped before recording one). Launch intents are on disk before the
/// cloud is called, so such a run left nothing in the cloud to recover.
pub(super) fn resume_point(dir: &Path) -> anyhow::Result<Option<Duration>> {
    let journal = Journal::<DomainEvent>::open(dir)
        .with_context(|| format!("cannot open the journal to resume in {}", dir.display()))?;
    let Some(last) = journal.last_seq()? else {
        return Ok(None);
    };
    let at = journal
        .read_raw_from(last)
        .next()
        .transpose()?
        .map_or(SIM_EPOCH_MS, |r| r.recorded_at_ms);
    Ok(Some(Duration::from_millis(
        (at - SIM_EPOCH_MS).max(0) as u64
    )))
}

/// What a resume works on: the journal's view and the freshly started system.
pub(super) struct Resume<'a> {
    pub view: &'a ClusterView,
    pub ctx: &'a Context,
    pub cloud: &'a dyn Backend,
    pub cluster: &'a SimCluster,
    pub system: &'a System,
    pub nodepools: &'a [NodePool],
}

impl Resume<'_> {
    /// Rebuilds the stopped run. Never launches twice, never leaves an instance without a
    /// NodeClaim.
    pub async fn run(&self) -> anyhow::Result<()> {
        let surviving: Vec<_> = self
            .view
            .live_nodeclaims()
            .filter_map(|(_, c)| c.instance.clone())
            .collect();
        self.cloud.restore(&surviving);
        let instances = self.cloud.list().await?;
        let plan = karpenter_core::recovery::plan_recovery(self.view, &instances);
        info!(
            adopt = plan.adopt.len(),
            relaunch = plan.relaunch.len(),
            abandon = plan.abandon.len(),
            finalize = plan.finalize.len(),
            terminate = plan.terminate.len(),
            "Resuming from the journal."
        );
        self.close(&plan)?;
        for instance in &plan.terminate {
            self.cloud.delete(&instance.id).await?;
        }
        for adopt in plan.adopt {
            self.adopt(adopt).await?;
        }
        Ok(())
    }

    /// Closes the NodeClaims that had not launched (their pods are planned again) and those
    /// whose instance is gone.
    fn close(&self, plan: &RecoveryPlan) -> anyhow::Result<()> {
        let mut ended = Vec::new();
        for name in plan.relaunch.iter().chain(&plan.abandon) {
            // The simulated cloud keeps no record of launches the journal did not see, so
            // these are planned again from scratch rather than relaunched with their token.
            ended.push(DomainEvent::NodeClaimTerminated {
                nodeclaim: name.clone(),
                reason: "not launched before the restart; its pods are planned again".into(),
            });
        }
        for (name, reason) in &plan.finalize {
            ended.push(DomainEvent::NodeClaimTerminated {
                nodeclaim: name.clone(),
                reason: reason.clone(),
            });
        }
        self.ctx.record(&ended).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Brings one NodeClaim back under its NodePool's actor, with its node; terminates its
    /// instance when its NodePool or instance type is gone.
    async fn adopt(&self, adopt: Adopt) -> anyhow::Result<()> {
        let (Some(claim), Some(instance_type), Some(pool)) = (
            self.view.nodeclaims.get(&adopt.nodeclaim),
            self.cloud.instance_type(&adopt.instance.instance_type),
            self.system.nodepool(&adopt.nodepool),
        ) else {
            warn!(nodeclaim = %adopt.nodeclaim, "Cannot adopt (NodePool or instance type gone); terminating its instance.");
            self.cloud.delete(&adopt.instance.id).await?;
            return self
                .ctx
                .record(&[DomainEvent::NodeClaimTerminated {
                    nodeclaim: adopt.nodeclaim.clone(),
                    reason: "not adoptable after restart".into(),
                }])
                .map_err(|e| anyhow::anyhow!("{e}"));
        };
        let plan = NodeClaimPlan {
            nodeclaim: adopt.nodeclaim.clone(),
            nodepool: adopt.nodepool.clone(),
            round: claim.round,
            pods: claim.pods.clone(),
            requests: BTreeMap::new(),
            instance_types: claim.instance_types.clone(),
            min_values_relaxed: claim.min_values_relaxed,
        };
        if adopt.state >= NodeClaimState::Registered {
            self.cluster.restore_node(&adopt.instance, &instance_type);
            self.restore_registration(&adopt, &plan).await?;
        } else {
            self.cluster.register(&adopt.instance, &instance_type);
        }
        // Waits for the actor, so the garbage collector started next sees it.
        pool.adopt(plan, adopt)
            .await
            .context("adopting a NodeClaim after the restart")
    }

    /// A restored node comes back as registration had left it: the NodePool's labels and
    /// taints (a GPU pool's taint keeps other pods off it), as the adopted NodeClaim does not
    /// register again.
    async fn restore_registration(
        &self,
        adopt: &Adopt,
        plan: &NodeClaimPlan,
    ) -> anyhow::Result<()> {
        let nodepool = self
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(adopt.nodepool.as_str()));
        let (Some(node), Some(nodepool)) = (&adopt.node, nodepool) else {
            return Ok(());
        };
        let object = karpenter_core::api::NodeClaim::planned(
            &adopt.nodeclaim,
            nodepool,
            &karpenter_core::scheduling::PlannedNodeClaim {
                nodepool: adopt.nodepool.clone(),
                requirements: Default::default(),
                instance_types: plan.instance_types.clone(),
                pods: plan.pods.clone(),
                requests: Default::default(),
                min_values_relaxed: plan.min_values_relaxed,
            },
        );
        karpenter_core::ports::Cluster::sync_node(self.cluster, node, &object)
            .await
            .context("restoring a node's labels and taints after the restart")
    }
}
