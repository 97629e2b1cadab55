//! Fleet questions answered over [`Tables`] in Rust: what `simulate` and `journal report`
//! print, and what SQL over the exported files gives for the same journal (the README's
//! DuckDB queries are these, written in SQL).

use std::collections::BTreeMap;

use crate::parquet::day;
use crate::rows::{PodRow, Tables};

/// What the fleet cost on one day (UTC).
#[derive(Debug, Clone, PartialEq)]
pub struct DaySpend {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Hours of that day the journal covers.
    pub hours: f64,
    /// Dollars spent in them.
    pub dollars: f64,
}

impl DaySpend {
    /// The mean $/h over the hours covered.
    pub fn cost_per_hour(&self) -> f64 {
        if self.hours > 0.0 {
            self.dollars / self.hours
        } else {
            0.0
        }
    }
}

/// Dollars and $/h by day: `sum(cost_per_hour * seconds) / sum(seconds)` over `fleet`.
pub fn spend_by_day(tables: &Tables) -> Vec<DaySpend> {
    let mut days: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for row in &tables.fleet {
        let (seconds, dollar_seconds) = days.entry(day(row.from_at)).or_default();
        *seconds += row.seconds;
        *dollar_seconds += row.cost_per_hour * row.seconds;
    }
    days.into_iter()
        .map(|(day, (seconds, dollar_seconds))| DaySpend {
            day,
            hours: seconds / 3600.0,
            dollars: dollar_seconds / 3600.0,
        })
        .collect()
}

/// The `n` longest waits: by `wait_seconds` descending, then `pod` and `pending_at`.
pub fn longest_waits(tables: &Tables, n: usize) -> Vec<&PodRow> {
    let mut waits: Vec<&PodRow> = tables.pods.iter().collect();
    waits.sort_by(|a, b| {
        b.wait_seconds
            .total_cmp(&a.wait_seconds)
            .then_with(|| a.pod.cmp(&b.pod))
            .then_with(|| a.pending_at.cmp(&b.pending_at))
    });
    waits.truncate(n);
    waits
}

/// What the commands of one disruption reason saved.
#[derive(Debug, Clone, PartialEq)]
pub struct ReasonSavings {
    /// `Empty`, `Underutilized` or `Drifted`.
    pub reason: String,
    /// Commands that finished (`Done`).
    pub commands: u64,
    /// NodeClaims they removed.
    pub nodeclaims: u64,
    /// $/h they saved, as decided.
    pub savings_per_hour: f64,
}

/// Savings of the finished commands by reason.
pub fn savings_by_reason(tables: &Tables) -> Vec<ReasonSavings> {
    let mut out: BTreeMap<&str, ReasonSavings> = BTreeMap::new();
    for row in tables.disruptions.iter().filter(|d| d.outcome == "Done") {
        let entry = out.entry(&row.reason).or_insert_with(|| ReasonSavings {
            reason: row.reason.clone(),
            commands: 0,
            nodeclaims: 0,
            savings_per_hour: 0.0,
        });
        entry.commands += 1;
        entry.nodeclaims += row.candidates;
        entry.savings_per_hour += row.savings_per_hour;
    }
    out.into_values().collect()
}

/// The three answers, as `simulate` and `journal report` print them.
pub fn print(tables: &Tables, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    for d in spend_by_day(tables) {
        writeln!(
            out,
            "spend {}: ${:.4} over {:.4} h, ${:.4}/h",
            d.day,
            d.dollars,
            d.hours,
            d.cost_per_hour()
        )?;
    }
    for r in savings_by_reason(tables) {
        writeln!(
            out,
            "savings {}: {} command(s), {} nodeclaim(s), ${:.4}/h",
            r.reason, r.commands, r.nodeclaims, r.savings_per_hour
        )?;
    }
    for w in longest_waits(tables, 10) {
        writeln!(
            out,
            "wait {:.3}s {} ({}): {}",
            w.wait_seconds, w.pod, w.outcome, w.why
        )?;
    }
    Ok(())
}
