//! `journal explain pod/NAMESPACE/NAME`: why a pod waited — when it became pending, what
//! every round that saw it decided (a node, an in-flight NodeClaim, a new NodeClaim, or
//! unschedulable and why), nominations kube-scheduler did not honour, and how it ended.

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::bail;
use karpenter_core::events::DomainEvent;
use karpenter_core::model::time::format_rfc3339;
use karpenter_journal::{Envelope, Journal};

/// What one pod's story is made of, gathered in one pass over the journal.
#[derive(Default)]
struct Story {
    /// The pod's UIDs (a pod recreated under the same name has a new one).
    uids: BTreeSet<String>,
    /// NodeClaims planned so far: a round placing a pod on one of these nominated it to
    /// capacity already on its way.
    nodeclaims: BTreeSet<String>,
    lines: Vec<Line>,
}

/// One thing that happened to the pod; consecutive rounds deciding the same are one line.
struct Line {
    at: String,
    seq: u64,
    /// First and last round, and how many rounds, for a round's decision.
    rounds: Option<(u64, u64, usize)>,
    text: String,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}] ", self.at, self.seq)?;
        match self.rounds {
            Some((first, _, 1)) => write!(f, "round {first}: ")?,
            Some((first, last, n)) => write!(f, "rounds {first}–{last} ({n} rounds): ")?,
            None => {}
        }
        f.write_str(&self.text)
    }
}

impl Story {
    fn say(&mut self, envelope: &Envelope<DomainEvent>, round: Option<u64>, text: String) {
        if let (Some(round), Some(last)) = (round, self.lines.last_mut())
            && let Some((_, to, n)) = &mut last.rounds
            && last.text == text
        {
            *to = round;
            *n += 1;
            return;
        }
        self.lines.push(Line {
            at: format_rfc3339(envelope.recorded_at_ms),
            seq: envelope.seq,
            rounds: round.map(|r| (r, r, 1)),
            text,
        });
    }

    fn add(&mut self, envelope: &Envelope<DomainEvent>, key: &str) {
        let say = |story: &mut Story, text: String| story.say(envelope, None, text);
        match &envelope.event {
            DomainEvent::PodPending { uid, pod, requests } if pod == key => {
                self.uids.insert(uid.clone());
                let requests: Vec<String> =
                    requests.iter().map(|(k, v)| format!("{k}={v}")).collect();
                say(
                    self,
                    format!(
                        "pending and provisionable (uid {uid}; requests {})",
                        requests.join(" ")
                    ),
                );
            }
            DomainEvent::NodeClaimPlanned(plan) => {
                self.nodeclaims.insert(plan.nodeclaim.clone());
                if plan.pods.iter().any(|p| self.uids.contains(p)) {
                    let text = format!(
                        "planned new NodeClaim {} for it (nodepool {}, cheapest option {})",
                        plan.nodeclaim,
                        plan.nodepool,
                        plan.instance_types
                            .first()
                            .map(|o| format!("{} {} {}", o.name, o.zone, o.capacity_type))
                            .unwrap_or_else(|| "-".into())
                    );
                    self.say(envelope, Some(plan.round), text);
                }
            }
            DomainEvent::RoundCompleted(round) => {
                let mut decided = Vec::new();
                for (uid, node) in &round.bindings {
                    if !self.uids.contains(uid) {
                        continue;
                    }
                    decided.push(if self.nodeclaims.contains(node) {
                        format!("nominated to in-flight NodeClaim {node}")
                    } else {
                        format!("fits on node {node}; left to kube-scheduler to bind")
                    });
                }
                for (uid, reason) in &round.unschedulable {
                    if self.uids.contains(uid) {
                        decided.push(format!(
                            "unschedulable: {reason}; planned again while it is pending"
                        ));
                    }
                }
                for text in decided {
                    self.say(envelope, Some(round.round), text);
                }
            }
            DomainEvent::NominationExpired {
                uid,
                nodeclaim,
                node,
            } if self.uids.contains(uid) => say(
                self,
                if nodeclaim.is_empty() {
                    format!(
                        "left to kube-scheduler on running node {node}, which was Ready but did not get the pod within the nomination window; planned elsewhere from now on"
                    )
                } else {
                    format!(
                        "nomination to NodeClaim {nodeclaim} expired: its node {node} was Ready but kube-scheduler did not bind the pod there; pending again"
                    )
                },
            ),
            DomainEvent::PodBound {
                uid,
                node,
                pod: Some(pod),
            } if pod == key && !self.uids.contains(uid) => {
                // Bound at once by kube-scheduler: never pending to us.
                self.uids.insert(uid.clone());
                say(self, format!("bound to node {node} (uid {uid})"))
            }
            DomainEvent::PodBound { uid, node, .. } if self.uids.contains(uid) => {
                say(self, format!("bound to node {node}"))
            }
            DomainEvent::PodDeleted { uid } if self.uids.contains(uid) => {
                say(self, "deleted (or finished)".into())
            }
            _ => {}
        }
    }
}

/// Prints what the journal holds about the pod `namespace/name`.
pub fn explain(journal: &Journal<DomainEvent>, key: &str) -> anyhow::Result<ExitCode> {
    if key.split('/').count() != 2 || key.split('/').any(str::is_empty) {
        bail!("{key:?}: name a pod as pod/NAMESPACE/NAME");
    }
    let mut story = Story::default();
    for envelope in journal.read_from(0) {
        story.add(&envelope?, key);
    }
    if story.uids.is_empty() {
        bail!("pod {key} was never pending in this journal");
    }
    println!("pod/{key}");
    for line in &story.lines {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
