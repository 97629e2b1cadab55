//! The disruption side of `journal replay|verify|tail`: the commands of a replayed state, one
//! line per disruption event, and every recorded decision decided again from its recorded
//! snapshot (`journal explain`'s side is [`karpenter_rs::explain::disruption`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_core::disruption::pass;
use karpenter_core::events::disruption::{DisruptionRecord, Phase};
use karpenter_core::events::{ClusterView, DomainEvent, NodeClaimPlan};
use karpenter_core::model::InstanceType;
use karpenter_journal::Journal;
use karpenter_rs::explain::disruption::{commands, names, replaced_by_text};

/// One line for `journal tail`.
pub fn summary(event: &DomainEvent) -> Option<String> {
    Some(match event {
        DomainEvent::DisruptionDecided(r) => format!(
            "{} candidates={} replacements={} saves=${:.4}/h",
            r.method.name(),
            names(r),
            if r.replacements.is_empty() {
                "-".to_owned()
            } else {
                r.replacements.join(",")
            },
            r.savings
        ),
        DomainEvent::DisruptionProgressed { phase, .. } => match phase {
            Phase::Abandoned(why) => format!("Abandoned: {why}"),
            phase => phase.name().to_owned(),
        },
        _ => return None,
    })
}

/// The commands of a replayed state, for `journal replay`.
pub fn print_commands(view: &ClusterView) {
    if view.disruptions.is_empty() {
        return;
    }
    let in_flight: Vec<_> = view.disruptions_in_flight().collect();
    let mut ended: BTreeMap<String, usize> = BTreeMap::new();
    for c in view.disruptions.values().filter(|c| c.phase.ended()) {
        *ended
            .entry(format!("{} {}", c.method.name(), c.phase.name()))
            .or_default() += 1;
    }
    println!(
        "disruption commands: {} in flight; ended: {}",
        in_flight.len(),
        if ended.is_empty() {
            "-".to_owned()
        } else {
            ended
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    for c in in_flight {
        println!(
            "  command {} {} {:<16} candidates={} replacements={}",
            c.id,
            c.method.name(),
            c.phase.name(),
            c.candidates
                .iter()
                .map(|m| m.nodeclaim.as_str())
                .collect::<Vec<_>>()
                .join(","),
            if c.replacements.is_empty() {
                "-".to_owned()
            } else {
                c.replacements.join(",")
            }
        );
    }
}

/// How many recorded decisions were decided again alike, differently, or not at all (no
/// input recorded).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// Same command.
    pub same: usize,
    /// Another command.
    pub different: usize,
    /// Not checked.
    pub skipped: usize,
}

/// Decides every recorded command again from its recorded snapshot (and, for commands
/// that moved pods, its recorded round, rebuilt from `catalogs`), and compares: the method,
/// the candidates, and each replacement's NodePool, pods and instance types.
pub fn verify(
    journal: &Journal<DomainEvent>,
    catalogs: &BTreeMap<String, Vec<Arc<InstanceType>>>,
    plans: &BTreeMap<String, NodeClaimPlan>,
) -> anyhow::Result<Verified> {
    let mut out = Verified::default();
    for (decided, _) in commands(journal)? {
        let DomainEvent::DisruptionDecided(r) = &decided.event else {
            continue;
        };
        let Some(input) = &r.input else {
            out.skipped += 1;
            println!("disruption {}: skipped (input not recorded)", r.command);
            continue;
        };
        let base = match &input.base {
            Some(base) => match base.rebuild(catalogs) {
                Some(base) => Some(base),
                None => {
                    out.skipped += 1;
                    println!(
                        "disruption {}: skipped (its round's instance types are not in the journal)",
                        r.command
                    );
                    continue;
                }
            },
            None => None,
        };
        // Without timeouts: a search the controller cut short at one would find as much.
        let options = pass::Options {
            timeouts: false,
            unconsolidatable: &input.unconsolidatable,
            ..pass::Options::default()
        };
        let again = pass::run_with(&input.snapshot, base.as_ref(), options);
        let problems = compare(r, again.command.as_ref(), plans);
        if problems.is_empty() {
            out.same += 1;
            println!(
                "disruption {}: same decision ({} of {}{})",
                r.command,
                r.method.name(),
                names(r),
                replaced_by_text(r)
            );
        } else {
            out.different += 1;
            println!(
                "disruption {}: DIFFERENT: {}",
                r.command,
                problems.join("; ")
            );
        }
    }
    Ok(out)
}

fn compare(
    recorded: &DisruptionRecord,
    again: Option<&pass::Decision>,
    plans: &BTreeMap<String, NodeClaimPlan>,
) -> Vec<String> {
    let Some(again) = again else {
        return vec!["no command now".into()];
    };
    let mut problems = Vec::new();
    if again.method != recorded.method {
        problems.push(format!(
            "method {} now {}",
            recorded.method.name(),
            again.method.name()
        ));
    }
    let candidates: Vec<&str> = recorded
        .candidates
        .iter()
        .map(|m| m.nodeclaim.as_str())
        .collect();
    let now: Vec<&str> = again.candidates.iter().map(String::as_str).collect();
    if candidates != now {
        problems.push(format!(
            "candidates {} now {}",
            candidates.join(","),
            now.join(",")
        ));
    }
    if recorded.replacements.len() != again.replacements.len() {
        problems.push(format!(
            "replacements {} now {}",
            recorded.replacements.len(),
            again.replacements.len()
        ));
    }
    for (name, claim) in recorded.replacements.iter().zip(&again.replacements) {
        match plans.get(name) {
            Some(plan)
                if plan.nodepool == claim.nodepool
                    && plan.pods == claim.pods
                    && plan.instance_types == claim.instance_types => {}
            Some(_) => problems.push(format!("replacement {name} differs")),
            None => problems.push(format!("replacement {name} was not recorded as planned")),
        }
    }
    problems
}
