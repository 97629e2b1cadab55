//! A NodePool's `NodeRegistrationHealthy` condition, as upstream decides it: the launch and
//! registration outcomes of its latest NodeClaims in a rolling buffer, emptied when the
//! NodePool or its node class changes. Two failures in the buffer make it unhealthy (one may
//! be transient), a success with fewer failures healthy; an empty buffer (after a restart)
//! says nothing, so the condition the object already carries stands.

use std::collections::VecDeque;

/// How many outcomes are kept.
pub const BUFFER: usize = 10;

/// Failures in the buffer that make a NodePool unhealthy.
pub const FAILURES_UNHEALTHY: usize = 2;

/// The latest launch and registration outcomes of one NodePool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrationHealth {
    /// Oldest first: `Ok` a registration, `Err` a failure and why.
    outcomes: VecDeque<Result<(), String>>,
}

/// What the condition should say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Verdict {
    /// Nodes register.
    Healthy,
    /// Launches or registrations keep failing; the latest reason.
    Unhealthy(String),
}

impl RegistrationHealth {
    /// A NodeClaim's node registered.
    pub fn registered(&mut self) {
        self.push(Ok(()));
    }

    /// A NodeClaim failed to launch or its node never registered.
    pub fn failed(&mut self, reason: impl Into<String>) {
        self.push(Err(reason.into()));
    }

    fn push(&mut self, outcome: Result<(), String>) {
        if self.outcomes.len() == BUFFER {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(outcome);
    }

    /// The NodePool or its node class changed: earlier outcomes say nothing about it.
    pub fn reset(&mut self) {
        self.outcomes.clear();
    }

    /// The verdict, or `None` when the buffer cannot tell (empty, or a single failure).
    pub fn verdict(&self) -> Option<Verdict> {
        let failures: Vec<&String> = self
            .outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .collect();
        if failures.len() >= FAILURES_UNHEALTHY {
            let latest = failures.last().map_or_else(String::new, |r| (*r).clone());
            return Some(Verdict::Unhealthy(latest));
        }
        self.outcomes
            .iter()
            .any(Result::is_ok)
            .then_some(Verdict::Healthy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(outcomes: &[bool]) -> RegistrationHealth {
        let mut h = RegistrationHealth::default();
        for ok in outcomes {
            if *ok {
                h.registered();
            } else {
                h.failed("registration_timeout");
            }
        }
        h
    }

    #[test]
    fn upstream_examples() {
        let unhealthy = Some(Verdict::Unhealthy("registration_timeout".into()));
        assert_eq!(health(&[]).verdict(), None);
        assert_eq!(health(&[true]).verdict(), Some(Verdict::Healthy));
        assert_eq!(
            health(&[false]).verdict(),
            None,
            "one failure may be transient"
        );
        assert_eq!(health(&[false, true]).verdict(), Some(Verdict::Healthy));
        assert_eq!(health(&[false, false]).verdict(), unhealthy);
        assert_eq!(health(&[false, true, false]).verdict(), unhealthy);
        let mut recovered = vec![false, false];
        recovered.extend([true; 9]);
        assert_eq!(
            health(&recovered).verdict(),
            Some(Verdict::Healthy),
            "the oldest failure left the buffer"
        );
    }

    #[test]
    fn a_change_forgets_the_outcomes() {
        let mut h = health(&[false, false]);
        h.reset();
        assert_eq!(h.verdict(), None);
    }
}
