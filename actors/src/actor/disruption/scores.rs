//! What a pass's consolidation moves are told as: `karpenter_consolidation_moves_total` and
//! `karpenter_consolidation_score` by decision, NodePool and policy, and a
//! `ConsolidationApproved` Event for a command a Balanced pool approved (on the candidate's
//! Node for one candidate, on the NodePool for several), as upstream's Balanced evaluator
//! reports them.

use karpenter_core::disruption::consolidation::command::Unconsolidatable;
use karpenter_core::disruption::pass::PassResult;
use karpenter_core::disruption::{NodeSnapshot, Snapshot};
use karpenter_core::ports::EventObject;

use super::{Context, event_object};

/// Counts the moves `result` approved and refused, and tells the approvals Balanced scored.
pub(super) fn observe(ctx: &Context, snapshot: &Snapshot, result: &PassResult) {
    let policy = |pool: &str| {
        snapshot
            .pool(pool)
            .map_or("", |p| p.policy.as_str())
            .to_owned()
    };
    for (_, why) in &result.unconsolidatable {
        if let Unconsolidatable::NotWorthIt(score) = why {
            ctx.metrics.consolidation_move(
                "rejected",
                &score.nodepool,
                &policy(&score.nodepool),
                Some(score.score()),
            );
        }
    }
    let Some(decision) = result.command.as_ref().filter(|d| d.method.consolidates()) else {
        return;
    };
    let pools: std::collections::BTreeSet<&str> = (snapshot.nodes.iter())
        .filter(|n| decision.candidates.contains(&n.nodeclaim))
        .map(|n: &NodeSnapshot| n.nodepool.as_str())
        .collect();
    for pool in pools {
        let score = decision.scores.iter().find(|s| s.nodepool == pool);
        ctx.metrics
            .consolidation_move("approved", pool, &policy(pool), score.map(|s| s.score()));
        let Some(score) = score else {
            continue;
        };
        let object = match decision.candidates.as_slice() {
            [one] => event_object(snapshot, one),
            _ => EventObject::NodePool(pool.to_owned()),
        };
        ctx.cluster
            .emit_event(&object, "ConsolidationApproved", &score.to_string());
    }
}
