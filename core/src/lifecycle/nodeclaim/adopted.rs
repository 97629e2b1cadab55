//! What a NodeClaim adopted after a restart (its instance survived) does first.

use crate::api::nodeclaim::condition;
use crate::events::NodeClaimState;
use crate::recovery::Adopt;

use super::{Command, Input, Timing, Update, condition_set};

/// Its object says what the journal says (launched, registered, initialized), the scheduler
/// and its NodePool count it again, a claim not registered yet gets its deadline back, and a
/// claim that was draining drains on: the restart lost the cordon and the evictions in
/// flight, so the drain starts again from its cordon (its terminationGracePeriod counts from
/// the restart, since the journal does not say when draining began).
pub fn adopted(adopt: &Adopt, timing: &Timing, now_ms: i64) -> Vec<Command> {
    let mut out = Vec::new();
    if adopt.state == NodeClaimState::Launched {
        out.push(Command::After(
            timing.registration_timeout,
            Input::RegistrationDeadline,
        ));
    }
    if adopt.state < NodeClaimState::Draining {
        // Drift is judged again soon: the node class may have changed while nobody looked.
        out.push(Command::After(timing.retry, Input::DriftDue));
    }
    out.push(Command::SchedulerLaunched(adopt.instance.clone()));
    out.push(Command::Update(Update::ObjectLaunched(
        adopt.instance.clone(),
    )));
    if let Some(node) = &adopt.node {
        out.push(Command::Update(Update::ObjectNode(node.clone())));
        out.push(set(condition::REGISTERED));
    }
    if adopt.state >= NodeClaimState::Initialized {
        out.push(set(condition::INITIALIZED));
    }
    out.push(Command::Next(Input::WriteDue));
    out.push(Command::PoolCounts);
    if adopt.state == NodeClaimState::Draining {
        out.push(Command::Update(Update::DrainSince(now_ms)));
        out.push(Command::Next(Input::DrainDue));
    }
    out
}

fn set(type_: &'static str) -> Command {
    condition_set(type_, true, type_, "")
}
