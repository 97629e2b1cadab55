//! What a replica does when it starts leading: the NodeClaim objects in the cluster are the
//! source of truth (its journal may be new, or another replica's), so each one that no actor
//! runs is adopted with its running instance, finalized when its instance is gone, or deleted
//! when it never launched. Later, NodeClaims deleted without an actor are finalized by
//! [`finalize_orphans`], instance first.

use karpenter_actors::actor::Context;
use karpenter_actors::handles::{NodePoolHandle, System};
use karpenter_core::api::NodeClaim;
use karpenter_core::events::{ClusterView, DomainEvent, NodeClaimState};
use karpenter_core::ports::{Cluster, EventObject, Instance};
use karpenter_core::recovery::{Adopt, plan_adoption, running_instance};
use tracing::{info, warn};

use super::cluster::{Caches, KubeCluster};

fn unowned(system: &System, caches: &Caches) -> Vec<NodeClaim> {
    caches
        .nodeclaims
        .state()
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| system.nodeclaim(n).is_none())
        })
        .map(|c| (**c).clone())
        .collect()
}

/// Adopts, finalizes or deletes every NodeClaim object no actor runs (see the module docs).
/// Runs once, before the watches' replayed signals are routed, so a NodeClaim being
/// deleted is adopted first and then drained by its actor.
pub async fn adopt_nodeclaims(
    system: &System,
    caches: &Caches,
    cluster: &KubeCluster,
    journaled: &ClusterView,
) -> anyhow::Result<()> {
    let ctx = system.context();
    let objects = unowned(system, caches);
    if objects.is_empty() {
        return Ok(());
    }
    let instances =
        ctx.cloud.list().await.map_err(|e| {
            anyhow::anyhow!("listing the cluster's instances to adopt NodeClaims: {e}")
        })?;
    let plan = plan_adoption(&objects, &instances);
    info!(
        adopt = plan.adopt.len(),
        finalize = plan.finalize.len(),
        abandon = plan.abandon.len(),
        "Taking over the cluster's NodeClaims."
    );
    for name in &plan.abandon {
        info!(nodeclaim = %name, "NodeClaim never launched; deleting it so its pods are planned again.");
        release(cluster, name).await;
    }
    for (name, node) in &plan.finalize {
        info!(nodeclaim = %name, "NodeClaim's instance is gone; finalizing it.");
        if let Some(node) = node
            && let Err(error) = cluster.delete_node(node).await
        {
            // Released only once its Node is gone: the next take-over finalizes it again.
            warn!(nodeclaim = %name, node, %error, "Deleting the Node failed; the NodeClaim is kept for the next take-over.");
            continue;
        }
        release(cluster, name).await;
    }
    for adopt in plan.adopt {
        let pool = match system.nodepool(&adopt.nodepool) {
            Some(pool) => Some(pool),
            None => host_invalid_pool(system, caches, cluster, &adopt.nodepool).await?,
        };
        let Some(pool) = pool else {
            // Its NodePool is gone, and Kubernetes deletes the NodeClaims it owned.
            warn!(nodeclaim = %adopt.nodeclaim, nodepool = %adopt.nodepool, "Cannot adopt: its NodePool is gone; terminating its instance.");
            cluster.emit_event(
                &EventObject::NodeClaim(adopt.nodeclaim.clone()),
                "FailedAdoption",
                &format!(
                    "NodePool {} does not exist; the instance is terminated",
                    adopt.nodepool
                ),
            );
            end_without_actor(
                ctx,
                cluster,
                &adopt.nodeclaim,
                Some(&adopt.instance),
                adopt.node.as_deref(),
            )
            .await;
            continue;
        };
        record_adoption(ctx, journaled, &adopt)?;
        let plan = adopt.plan_from_object();
        let name = adopt.nodeclaim.clone();
        // Waits for the actor: the watches' replayed signals are routed to it next.
        if let Err(error) = pool.adopt(plan, adopt).await {
            anyhow::bail!("NodeClaim {name} could not be adopted: {error}");
        }
    }
    Ok(())
}

/// A NodePool that exists but is invalid plans nothing, but its NodeClaims are still run
/// (and drained when deleted) by an actor the supervisor hosts for it.
async fn host_invalid_pool(
    system: &System,
    caches: &Caches,
    cluster: &KubeCluster,
    nodepool: &str,
) -> anyhow::Result<Option<NodePoolHandle>> {
    let Some(pool) = caches
        .nodepools
        .get(&kube::runtime::reflector::ObjectRef::new(nodepool))
    else {
        return Ok(None);
    };
    if pool.metadata.deletion_timestamp.is_none() {
        cluster.emit_event(
            &EventObject::NodePool(nodepool.to_owned()),
            "InvalidNodePool",
            "invalid: its existing NodeClaims are kept and drained as usual, but no new ones are planned until it is fixed",
        );
    }
    let hosted = system
        .host_nodepool((*pool).clone())
        .await
        .map_err(|e| anyhow::anyhow!("hosting NodePool {nodepool}: {e}"))?;
    Ok(Some(hosted))
}

/// The journal is this replica's flight recorder: a NodeClaim it did not launch is recorded
/// as found (planned, launched, registered, initialized as its object says), so a replay
/// shows it.
fn record_adoption(ctx: &Context, journaled: &ClusterView, adopt: &Adopt) -> anyhow::Result<()> {
    let known = journaled
        .nodeclaims
        .get(&adopt.nodeclaim)
        .is_some_and(|c| c.ended.is_none() && c.instance.is_some());
    if known {
        return Ok(());
    }
    let name = adopt.nodeclaim.clone();
    let mut events = vec![
        DomainEvent::NodeClaimPlanned(Box::new(adopt.plan_from_object())),
        DomainEvent::NodeClaimLaunched {
            nodeclaim: name.clone(),
            instance: Box::new(adopt.instance.clone()),
        },
    ];
    if let (Some(node), true) = (&adopt.node, adopt.state >= NodeClaimState::Registered) {
        events.push(DomainEvent::NodeClaimRegistered {
            nodeclaim: name.clone(),
            node: node.clone(),
        });
    }
    if adopt.state >= NodeClaimState::Initialized {
        events.push(DomainEvent::NodeClaimInitialized { nodeclaim: name });
    }
    ctx.record(&events).map_err(|e| anyhow::anyhow!("{e}"))
}

async fn release(cluster: &KubeCluster, name: &str) {
    if let Err(error) = cluster.release_nodeclaim(name).await {
        warn!(nodeclaim = %name, %error, "Finalizing the NodeClaim failed; retried on the next sweep.");
    }
}

/// Ends a NodeClaim no actor runs: its instance terminated (if it runs), its Node deleted,
/// its object released. The object stays (finalizer held) if the instance could not be
/// terminated or the Node deleted, and the next sweep tries again.
async fn end_without_actor(
    ctx: &Context,
    cluster: &KubeCluster,
    name: &str,
    instance: Option<&Instance>,
    node: Option<&str>,
) {
    if let Some(instance) = instance {
        if let Err(error) = ctx.cloud.delete(&instance.id).await {
            warn!(nodeclaim = %name, instance.id = %instance.id, %error, "Terminating the instance failed; retried on the next sweep.");
            return;
        }
        let _ = ctx.record(&[DomainEvent::NodeClaimTerminated {
            nodeclaim: name.to_owned(),
            reason: "deleted while no actor ran it".into(),
        }]);
    }
    if let Some(node) = node
        && let Err(error) = cluster.delete_node(node).await
    {
        warn!(nodeclaim = %name, node, %error, "Deleting the Node failed; retried on the next sweep.");
        return;
    }
    release(cluster, name).await;
}

/// Finalizes NodeClaims being deleted that no actor runs (created by another process, or
/// whose NodePool was gone at adoption): instance terminated first, then Node and object.
/// Called when such a deletion is seen and on every status tick, so none stays stuck.
pub async fn finalize_orphans(system: &System, caches: &Caches, cluster: &KubeCluster) {
    let ctx = system.context();
    let deleting: Vec<NodeClaim> = unowned(system, caches)
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some())
        .collect();
    if deleting.is_empty() {
        return;
    }
    let instances = match ctx.cloud.list().await {
        Ok(list) => list,
        Err(error) => {
            warn!(%error, "Listing instances failed; orphaned NodeClaims are finalized on the next sweep.");
            return;
        }
    };
    for claim in deleting {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let running = running_instance(&claim, &instances);
        info!(nodeclaim = %name, instance = ?running.map(|i| &i.id), "Finalizing a deleted NodeClaim no actor runs.");
        let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
        end_without_actor(ctx, cluster, &name, running, node.as_deref()).await;
    }
}
