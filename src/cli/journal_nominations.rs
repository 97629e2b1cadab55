//! The nomination side of `journal verify|tail`: every recorded nomination check decided
//! again from what it recorded.

use karpenter_core::events::DomainEvent;
use karpenter_core::events::nominations::NominationRecord;
use karpenter_core::provisioning::nominations::check;
use karpenter_journal::Journal;

/// One line for `journal tail`.
pub fn summary(record: &NominationRecord) -> String {
    let expired: Vec<&str> = record
        .outcome
        .expired
        .iter()
        .map(|e| e.uid.as_str())
        .collect();
    format!(
        "nominated to {} NodeClaim(s), {} pod(s) left on running nodes; expired: {}",
        record.check.claims.len(),
        record.check.left.len(),
        if expired.is_empty() {
            "-".to_owned()
        } else {
            expired.join(",")
        }
    )
}

/// How many recorded checks were decided again alike, and which differed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Checks decided alike.
    pub same: usize,
    /// Sequence numbers of checks decided differently, with what differed.
    pub different: Vec<(u64, String)>,
}

/// Decides every recorded nomination check again and compares the waits that ran out and
/// the clocks after it. Prints a line for each check that differs.
pub fn verify(journal: &Journal<DomainEvent>) -> anyhow::Result<Verified> {
    let mut out = Verified::default();
    for envelope in journal.read_from(0) {
        let envelope = envelope?;
        let DomainEvent::NominationsChecked(record) = &envelope.event else {
            continue;
        };
        let again = check(&record.check);
        let mut problems = Vec::new();
        if again.expired != record.outcome.expired {
            problems.push(format!(
                "expired {} now {}",
                record.outcome.expired.len(),
                again.expired.len()
            ));
        }
        if again.open_since != record.outcome.open_since
            || again.left_since != record.outcome.left_since
        {
            problems.push("clocks differ".to_owned());
        }
        if problems.is_empty() {
            out.same += 1;
        } else {
            let problems = problems.join("; ");
            println!(
                "nomination check at seq {}: DIFFERENT: {problems}",
                envelope.seq
            );
            out.different.push((envelope.seq, problems));
        }
    }
    Ok(out)
}
