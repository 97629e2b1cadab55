//! A disruption command from its start to its end, as upstream's orchestration queue runs
//! one: the candidates are tainted `karpenter.sh/disrupted:NoSchedule` (so nothing new lands
//! on them) and the replacements launched; once every replacement has initialized, the
//! candidates are deleted (drained within PodDisruptionBudgets, then terminated); if a
//! replacement fails (no capacity, no registration) or does not initialize in time, the
//! taints are taken back and the command is given up. The old node never drains before its
//! replacements are ready.
//!
//! [`advance`] decides what to do from the command and what the NodeClaims it names are now;
//! the actor carries the actions out and journals each phase it enters.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::events::NodeClaimPlan;
use crate::model::Requirements;
use crate::ports::EventObject;
use crate::provisioning::{plan_of, suffix};
use crate::scheduling::PlannedNodeClaim;

pub use crate::events::disruption::{Command, Member, Phase};

/// How long replacements have to initialize before a command is given up (upstream's retry
/// budget tops out at an hour; a replacement that cannot register is gone well before, at
/// its registration timeout).
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(3600);

/// The replacements of command `command`, named `<nodepool>-<suffix>` as a round names its
/// NodeClaims (from a stream of names of their own, so they never take a round's), each
/// with the requirements it launches under; `round` is the scheduling round they count as
/// planned in (their launch token's).
pub fn replacement_plans(
    replacements: &[PlannedNodeClaim],
    command: u64,
    round: u64,
    seed: u64,
) -> Vec<(NodeClaimPlan, Requirements)> {
    const STREAM: u64 = 0xD15C_0000_0000_0000;
    replacements
        .iter()
        .enumerate()
        .map(|(index, claim)| plan_of(claim, suffix(seed ^ STREAM, command, index), round))
        .collect()
}

/// What a NodeClaim of a command is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Launching, registering or initializing.
    Coming,
    /// Initialized.
    Initialized,
    /// Being drained or terminated.
    Deleting,
    /// Gone (terminated, or no actor runs it), with why when known.
    Gone(String),
}

/// What the actor does for a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Taint these nodes `karpenter.sh/disrupted:NoSchedule` and set their NodeClaims'
    /// `DisruptionReason` condition.
    Taint(Vec<Member>),
    /// Take the taints and conditions back.
    Untaint(Vec<Member>),
    /// Delete these NodeClaims (drain, then terminate) for the reason.
    Delete(Vec<String>),
    /// A Kubernetes Event.
    Emit {
        /// About.
        object: EventObject,
        /// Upstream's reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
    /// Record that the command entered a phase, and enter it.
    Enter(Phase),
    /// Record that the wait for replacements has been reported.
    ReportedWaiting,
}

/// What Events about a member are about: its Node, or its NodeClaim before it has one.
pub fn object(member: &Member) -> EventObject {
    match &member.node {
        Some(node) => EventObject::Node(node.clone()),
        None => EventObject::NodeClaim(member.nodeclaim.clone()),
    }
}

/// A command in words: `Drifted disruption of a, replaced by b`.
pub fn describe(command: &Command) -> String {
    let names: Vec<&str> = command
        .candidates
        .iter()
        .map(|m| m.nodeclaim.as_str())
        .collect();
    let mut text = format!(
        "{} disruption of {}",
        super::reason_name(command.reason()),
        names.join(", ")
    );
    if !command.replacements.is_empty() {
        text.push_str(&format!(
            ", replaced by {}",
            command.replacements.join(", ")
        ));
    }
    text
}

/// What a new command does first: taint its candidates (the replacements are launched by the
/// actor alongside), and, without replacements, go straight to deleting them.
pub fn start(command: &Command) -> Vec<Action> {
    let mut out = vec![Action::Taint(command.candidates.clone())];
    if !command.replacements.is_empty() {
        for member in &command.candidates {
            out.push(Action::Emit {
                object: object(member),
                reason: "DisruptionLaunching",
                message: format!(
                    "Launching NodeClaim(s) {} for {}",
                    command.replacements.join(", "),
                    describe(command)
                ),
            });
        }
    }
    out
}

/// What a command found unfinished in the journal after a restart does first: one still
/// waiting for its replacements marks its candidates again (the marks may never have been
/// made, or may have been taken back as stale); one terminating just carries on.
pub fn resume(command: &Command) -> Vec<Action> {
    match command.phase {
        Phase::WaitingReadiness => vec![Action::Taint(command.candidates.clone())],
        _ => Vec::new(),
    }
}

/// What to do next, given what each NodeClaim of the command is now (a name missing from
/// `seen` is gone) and the time.
pub fn advance(command: &Command, seen: &BTreeMap<String, Seen>, now_ms: i64) -> Vec<Action> {
    let of = |name: &str| seen.get(name).cloned().unwrap_or(Seen::Gone(String::new()));
    match &command.phase {
        Phase::WaitingReadiness => {
            let failed = command.replacements.iter().find_map(|r| match of(r) {
                Seen::Gone(why) => Some(format!(
                    "replacement {r} is gone{}",
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(" ({why})")
                    }
                )),
                Seen::Deleting => Some(format!("replacement {r} is being deleted")),
                Seen::Coming | Seen::Initialized => None,
            });
            let waited = now_ms.saturating_sub(command.started_ms);
            let failed = failed.or_else(|| {
                (waited >= i64::try_from(READINESS_TIMEOUT.as_millis()).unwrap_or(i64::MAX)).then(
                    || format!("replacements did not initialize within {READINESS_TIMEOUT:?}"),
                )
            });
            if let Some(why) = failed {
                return give_up(command, seen, why);
            }
            if command
                .replacements
                .iter()
                .all(|r| of(r) == Seen::Initialized)
            {
                return terminate(command, seen);
            }
            if command.waiting_reported {
                return Vec::new();
            }
            let mut out: Vec<Action> = command
                .candidates
                .iter()
                .map(|member| Action::Emit {
                    object: object(member),
                    reason: "DisruptionWaitingReadiness",
                    message: format!(
                        "Waiting on readiness to continue disruption ({})",
                        describe(command)
                    ),
                })
                .collect();
            out.push(Action::ReportedWaiting);
            out
        }
        Phase::Terminating => {
            let all_gone = command
                .candidates
                .iter()
                .all(|m| matches!(of(&m.nodeclaim), Seen::Gone(_)));
            if all_gone {
                vec![Action::Enter(Phase::Done)]
            } else {
                Vec::new()
            }
        }
        Phase::Done | Phase::Abandoned(_) => Vec::new(),
    }
}

/// Candidates not gone or deleting already.
fn present<'a>(
    command: &'a Command,
    seen: &'a BTreeMap<String, Seen>,
) -> impl Iterator<Item = &'a Member> {
    command.candidates.iter().filter(|m| {
        matches!(
            seen.get(&m.nodeclaim),
            Some(Seen::Coming | Seen::Initialized)
        )
    })
}

fn terminate(command: &Command, seen: &BTreeMap<String, Seen>) -> Vec<Action> {
    let members: Vec<&Member> = present(command, seen).collect();
    let mut out: Vec<Action> = members
        .iter()
        .map(|member| Action::Emit {
            object: object(member),
            reason: "DisruptionTerminating",
            message: format!("Disrupting Node: {}", describe(command)),
        })
        .collect();
    out.push(Action::Delete(
        members.iter().map(|m| m.nodeclaim.clone()).collect(),
    ));
    out.push(Action::Enter(Phase::Terminating));
    out
}

/// Gives the command up for `why`: its candidates still there are unmarked and told so.
pub fn give_up(command: &Command, seen: &BTreeMap<String, Seen>, why: String) -> Vec<Action> {
    let members: Vec<Member> = present(command, seen).cloned().collect();
    let mut out: Vec<Action> = members
        .iter()
        .map(|member| Action::Emit {
            object: object(member),
            reason: "DisruptionBlocked",
            message: format!(
                "Gave up {}: {why}; disruption taints removed",
                describe(command)
            ),
        })
        .collect();
    out.push(Action::Untaint(members));
    out.push(Action::Enter(Phase::Abandoned(why)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::Method;

    fn member(name: &str) -> Member {
        Member {
            nodeclaim: name.into(),
            node: Some(format!("node-{name}")),
        }
    }

    fn command(replacements: &[&str]) -> Command {
        Command {
            id: 1,
            method: Method::Drift,
            candidates: vec![member("old")],
            replacements: replacements.iter().map(|r| (*r).to_owned()).collect(),
            phase: Phase::WaitingReadiness,
            started_ms: 0,
            waiting_reported: false,
        }
    }

    fn seen(pairs: &[(&str, Seen)]) -> BTreeMap<String, Seen> {
        pairs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect()
    }

    #[test]
    fn candidates_drain_only_once_every_replacement_initialized() {
        let c = command(&["new-a", "new-b"]);
        let start = start(&c);
        assert_eq!(start[0], Action::Taint(vec![member("old")]));
        assert!(matches!(
            &start[1],
            Action::Emit {
                reason: "DisruptionLaunching",
                ..
            }
        ));
        let waiting = seen(&[
            ("old", Seen::Initialized),
            ("new-a", Seen::Initialized),
            ("new-b", Seen::Coming),
        ]);
        let actions = advance(&c, &waiting, 1_000);
        assert!(matches!(
            &actions[0],
            Action::Emit {
                reason: "DisruptionWaitingReadiness",
                ..
            }
        ));
        assert_eq!(actions.last(), Some(&Action::ReportedWaiting));
        assert!(!actions.iter().any(|a| matches!(a, Action::Delete(_))));
        let reported = Command {
            waiting_reported: true,
            ..c.clone()
        };
        assert!(advance(&reported, &waiting, 2_000).is_empty());
        let ready = seen(&[
            ("old", Seen::Initialized),
            ("new-a", Seen::Initialized),
            ("new-b", Seen::Initialized),
        ]);
        let actions = advance(&reported, &ready, 3_000);
        assert!(actions.contains(&Action::Delete(vec!["old".into()])));
        assert_eq!(actions.last(), Some(&Action::Enter(Phase::Terminating)));
        let terminating = Command {
            phase: Phase::Terminating,
            ..reported
        };
        assert!(advance(&terminating, &seen(&[("old", Seen::Deleting)]), 4_000).is_empty());
        assert_eq!(
            advance(&terminating, &seen(&[]), 5_000),
            vec![Action::Enter(Phase::Done)]
        );
    }

    #[test]
    fn a_failed_or_late_replacement_gives_the_command_up_and_untaints() {
        let c = command(&["new"]);
        let actions = advance(
            &c,
            &seen(&[
                ("old", Seen::Initialized),
                ("new", Seen::Gone("insufficient_capacity".into())),
            ]),
            1_000,
        );
        assert!(actions.contains(&Action::Untaint(vec![member("old")])));
        assert!(
            matches!(actions.last(), Some(Action::Enter(Phase::Abandoned(why))) if why.contains("insufficient_capacity"))
        );
        let late = advance(
            &c,
            &seen(&[("old", Seen::Initialized), ("new", Seen::Coming)]),
            3_600_000,
        );
        assert!(
            matches!(late.last(), Some(Action::Enter(Phase::Abandoned(why))) if why.contains("did not initialize"))
        );
        // A candidate already gone (interrupted meanwhile) is not untainted.
        let gone = advance(&c, &seen(&[("new", Seen::Deleting)]), 1_000);
        assert!(gone.contains(&Action::Untaint(Vec::new())));
    }

    #[test]
    fn without_replacements_the_candidates_are_deleted_at_once() {
        let c = Command {
            method: Method::Emptiness,
            ..command(&[])
        };
        assert_eq!(start(&c), vec![Action::Taint(vec![member("old")])]);
        let actions = advance(&c, &seen(&[("old", Seen::Initialized)]), 0);
        assert!(actions.contains(&Action::Delete(vec!["old".into()])));
    }
}
