//! Disruption budgets (`spec.disruption.budgets`): how many of a NodePool's nodes may be
//! voluntarily disrupted at once, for a reason, now.
//!
//! As upstream: a budget without a schedule is always active; one with a schedule (a 5-field
//! cron expression or `@daily`-style macro, in UTC) is active when the schedule hit within
//! the last `duration`. `nodes` is a count or a percentage of the pool's nodes, rounded up
//! (as a PodDisruptionBudget's `maxUnavailable`). The allowance for a reason is the smallest
//! over the active budgets that name it (a budget naming no reason names them all); a budget
//! that cannot be read allows nothing for the reasons it names (fail closed), and says why.
//! Nodes already disrupting or NotReady use the allowance up.

use std::collections::BTreeMap;
use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::NodeSnapshot;
use crate::api::nodepool::{Budget, DisruptionReason};
use crate::vocab::duration::parse_duration;

/// What `allowed` returns when no active budget limits a reason (upstream's `MaxInt32`).
pub const UNLIMITED: usize = i32::MAX as usize;

/// Every reason a budget can name, for budgets that name none.
pub const ALL_REASONS: [DisruptionReason; 3] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
];

/// A budget that cannot be read: it allows nothing for the reasons it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `nodes` is neither a count nor a percentage.
    #[error(
        "spec.disruption.budgets[{index}].nodes: {value:?} is neither a node count (\"5\") nor a percentage (\"10%\")"
    )]
    Nodes {
        /// Budget index.
        index: usize,
        /// The value.
        value: String,
    },
    /// `schedule` is not a 5-field cron expression or macro.
    #[error(
        "spec.disruption.budgets[{index}].schedule: {value:?} is not a 5-field cron expression or @yearly/@monthly/@weekly/@daily/@hourly: {message}"
    )]
    Schedule {
        /// Budget index.
        index: usize,
        /// The value.
        value: String,
        /// What the cron parser said.
        message: String,
    },
    /// `duration` is not a duration.
    #[error(
        "spec.disruption.budgets[{index}].duration: {value:?} is not a duration such as \"10m\" or \"1h30m\""
    )]
    Duration {
        /// Budget index.
        index: usize,
        /// The value.
        value: String,
    },
    /// Only one of `schedule` and `duration` is set.
    #[error("spec.disruption.budgets[{index}]: schedule and duration must be set together")]
    Unpaired {
        /// Budget index.
        index: usize,
    },
}

/// How many nodes a budget allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    /// A count.
    Count(usize),
    /// A percentage of the pool's nodes, rounded up.
    Percent(u8),
}

impl Nodes {
    /// Parses `"5"` or `"10%"` (0–100).
    pub fn parse(text: &str) -> Option<Nodes> {
        match text.strip_suffix('%') {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= 100)
                .map(Nodes::Percent),
            Some(_) => None,
            None if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                text.parse().ok().map(Nodes::Count)
            }
            None => None,
        }
    }

    /// The node count for a pool of `nodes` nodes.
    pub fn of(self, nodes: usize) -> usize {
        match self {
            Nodes::Count(n) => n,
            Nodes::Percent(p) => (nodes * usize::from(p)).div_ceil(100),
        }
    }
}

/// A budget, read.
#[derive(Debug, Clone)]
pub struct Rule {
    /// How many nodes.
    pub nodes: Nodes,
    /// When it is active; always when `None`.
    pub window: Option<(Cron, Duration)>,
    /// The reasons it limits.
    pub reasons: Vec<DisruptionReason>,
}

/// A cron parser as upstream's (`robfig/cron`'s standard parser): five fields, no seconds or
/// years, day-of-month and day-of-week combined with OR, and the macros.
fn parse_schedule(text: &str) -> Result<Cron, String> {
    let text = text.trim();
    // `@midnight` is the standard parser's alias of `@daily`.
    let text = if text.eq_ignore_ascii_case("@midnight") {
        "@daily"
    } else {
        text
    };
    if text.starts_with('@')
        && ![
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@hourly",
        ]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(text))
    {
        return Err("unknown macro".into());
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| e.to_string())
}

impl Rule {
    /// Reads budget `index`.
    pub fn parse(budget: &Budget, index: usize) -> Result<Rule, BudgetError> {
        let nodes = Nodes::parse(&budget.nodes).ok_or_else(|| BudgetError::Nodes {
            index,
            value: budget.nodes.clone(),
        })?;
        let window = match (&budget.schedule, &budget.duration) {
            (None, None) => None,
            (Some(schedule), Some(duration)) => {
                let cron = parse_schedule(schedule).map_err(|message| BudgetError::Schedule {
                    index,
                    value: schedule.clone(),
                    message,
                })?;
                let length = parse_duration(duration).map_err(|_| BudgetError::Duration {
                    index,
                    value: duration.clone(),
                })?;
                Some((cron, length))
            }
            _ => return Err(BudgetError::Unpaired { index }),
        };
        Ok(Rule {
            nodes,
            window,
            reasons: budget.reasons.clone(),
        })
    }

    /// Whether it limits `reason`.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        names(&self.reasons, reason)
    }

    /// Whether it is active at `now_ms`: always without a schedule, else when the schedule
    /// hit in the last `duration` (a hit exactly `duration` ago no longer counts).
    pub fn active(&self, now_ms: i64) -> bool {
        let Some((cron, length)) = &self.window else {
            return true;
        };
        let now = utc(now_ms);
        let length_ms = i64::try_from(length.as_millis()).unwrap_or(i64::MAX);
        let checkpoint = utc(now_ms.saturating_sub(length_ms));
        match cron.find_next_occurrence(&checkpoint, false) {
            Ok(next) => next <= now,
            Err(_) => false,
        }
    }
}

/// Whether a budget's `reasons` name `reason` (none names them all).
fn names(reasons: &[DisruptionReason], reason: DisruptionReason) -> bool {
    reasons.is_empty() || reasons.contains(&reason)
}

fn utc(ms: i64) -> jiff::Zoned {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
}

/// How many of a pool's `nodes` may be disrupted for `reason` at `now_ms` by `budgets`,
/// before subtracting those already disrupting; [`UNLIMITED`] when no active budget names
/// the reason. A budget that cannot be read allows 0 for the reasons it names, and is
/// returned as the error beside the count.
pub fn allowed(
    budgets: &[Budget],
    reason: DisruptionReason,
    nodes: usize,
    now_ms: i64,
) -> (usize, Vec<BudgetError>) {
    let mut allowed = UNLIMITED;
    let mut errors = Vec::new();
    for (index, budget) in budgets.iter().enumerate() {
        match Rule::parse(budget, index) {
            Ok(rule) => {
                if rule.applies_to(reason) && rule.active(now_ms) {
                    allowed = allowed.min(rule.nodes.of(nodes));
                }
            }
            Err(error) => {
                if names(&budget.reasons, reason) {
                    allowed = 0;
                }
                errors.push(error);
            }
        }
    }
    (allowed, errors)
}

/// The budgets that cannot be read (they allow nothing for the reasons they name).
pub fn errors(budgets: &[Budget]) -> Vec<BudgetError> {
    budgets
        .iter()
        .enumerate()
        .filter_map(|(index, budget)| Rule::parse(budget, index).err())
        .collect()
}

/// What a pool's nodes use of its budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolNodes {
    /// Initialized nodes (those deleting included): what percentages are of.
    pub total: usize,
    /// Of those, nodes NotReady or already being disrupted (by a command, expiry,
    /// interruption or a manual delete): they use the allowance up.
    pub disrupting: usize,
}

/// Per pool, how many more nodes may be disrupted for `reason` now: the budgets' allowance
/// less the nodes already disrupting, never below 0. Pools with no entry in `counts` have no
/// nodes.
pub fn mapping<'a>(
    pools: impl IntoIterator<Item = (&'a str, &'a [Budget])>,
    counts: &BTreeMap<String, PoolNodes>,
    reason: DisruptionReason,
    now_ms: i64,
) -> BTreeMap<String, usize> {
    pools
        .into_iter()
        .map(|(name, budgets)| {
            let count = counts.get(name).copied().unwrap_or_default();
            let (allowed, _) = allowed(budgets, reason, count.total, now_ms);
            (name.to_owned(), allowed.saturating_sub(count.disrupting))
        })
        .collect()
}

/// `nodes` in order, cut to what each pool's `budget` still allows (which they use up).
pub fn within<'a>(
    nodes: impl IntoIterator<Item = &'a NodeSnapshot>,
    budget: &mut BTreeMap<String, usize>,
) -> Vec<&'a NodeSnapshot> {
    let mut out = Vec::new();
    for node in nodes {
        if let Some(left) = budget.get_mut(&node.nodepool)
            && *left > 0
        {
            *left -= 1;
            out.push(node);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    /// 2027-01-15T08:00:00Z, a Friday.
    const NOW: i64 = 1_800_000_000_000;

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> Budget {
        Budget {
            nodes: nodes.into(),
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
            reasons: Vec::new(),
        }
    }

    #[test]
    fn counts_and_percentages_round_up() {
        assert_eq!(Nodes::parse("5"), Some(Nodes::Count(5)));
        assert_eq!(Nodes::parse("10%"), Some(Nodes::Percent(10)));
        assert_eq!(Nodes::parse("100%"), Some(Nodes::Percent(100)));
        for bad in ["", "%", "101%", "-1", "1.5", "ten", "10 %"] {
            assert_eq!(Nodes::parse(bad), None, "{bad}");
        }
        assert_eq!(Nodes::Percent(10).of(0), 0);
        assert_eq!(Nodes::Percent(10).of(1), 1);
        assert_eq!(Nodes::Percent(10).of(10), 1);
        assert_eq!(Nodes::Percent(10).of(11), 2);
        assert_eq!(Nodes::Percent(0).of(50), 0);
        assert_eq!(Nodes::Count(3).of(1), 3);
    }

    #[test]
    fn the_smallest_active_budget_naming_the_reason_wins() {
        let mut empty_only = budget("0", None, None);
        empty_only.reasons = vec![DisruptionReason::Empty];
        let budgets = vec![
            budget("50%", None, None),
            budget("3", None, None),
            empty_only,
        ];
        assert_eq!(allowed(&budgets, DisruptionReason::Drifted, 20, NOW).0, 3);
        assert_eq!(allowed(&budgets, DisruptionReason::Drifted, 4, NOW).0, 2);
        assert_eq!(allowed(&budgets, DisruptionReason::Empty, 20, NOW).0, 0);
        assert_eq!(allowed(&[], DisruptionReason::Empty, 20, NOW).0, UNLIMITED);
    }

    #[test]
    fn a_schedule_is_active_for_its_duration_after_each_hit() {
        // Every day at 08:00 UTC for 30 minutes: nothing may be disrupted then.
        let budgets = vec![budget("0", Some("0 8 * * *"), Some("30m"))];
        let at = |minutes: i64| {
            allowed(
                &budgets,
                DisruptionReason::Empty,
                10,
                NOW + minutes * 60_000,
            )
            .0
        };
        assert_eq!(at(-1), UNLIMITED);
        assert_eq!(at(0), 0);
        assert_eq!(at(29), 0);
        assert_eq!(at(30), UNLIMITED);
        // Macros, and upstream's @midnight alias.
        for schedule in ["@daily", "@midnight"] {
            let budgets = vec![budget("0", Some(schedule), Some("8h30m"))];
            assert_eq!(
                allowed(&budgets, DisruptionReason::Empty, 10, NOW).0,
                0,
                "{schedule}"
            );
            assert_eq!(
                allowed(&budgets, DisruptionReason::Empty, 10, NOW + 31 * 60_000).0,
                UNLIMITED,
                "{schedule}"
            );
        }
        // Fridays only (2027-01-15 is a Friday), and not on Saturdays.
        let fridays = vec![budget("0", Some("0 0 * * FRI"), Some("24h"))];
        assert_eq!(allowed(&fridays, DisruptionReason::Empty, 10, NOW).0, 0);
        assert_eq!(
            allowed(&fridays, DisruptionReason::Empty, 10, NOW + 86_400_000).0,
            UNLIMITED
        );
    }

    #[test]
    fn an_unreadable_budget_allows_nothing_for_its_reasons_and_says_why() {
        let cases = [
            (budget("lots", None, None), "nodes: \"lots\""),
            (
                budget("1", Some("0 8 * *"), Some("1h")),
                "schedule: \"0 8 * *\"",
            ),
            (budget("1", Some("0 0 8 * * *"), Some("1h")), "schedule"),
            (budget("1", Some("@fortnightly"), Some("1h")), "schedule"),
            (
                budget("1", Some("@daily"), Some("soon")),
                "duration: \"soon\"",
            ),
            (budget("1", Some("@daily"), None), "must be set together"),
        ];
        for (bad, needle) in cases {
            let (count, errors) = allowed(
                std::slice::from_ref(&bad),
                DisruptionReason::Drifted,
                10,
                NOW,
            );
            assert_eq!(count, 0, "{bad:?}");
            let text = errors[0].to_string();
            assert!(
                text.contains("spec.disruption.budgets[0]") && text.contains(needle),
                "{text}"
            );
        }
        // Only for the reasons it names.
        let mut bad = budget("lots", None, None);
        bad.reasons = vec![DisruptionReason::Underutilized];
        assert_eq!(
            allowed(&[bad], DisruptionReason::Empty, 10, NOW).0,
            UNLIMITED
        );
    }

    #[test]
    fn nodes_disrupting_use_the_allowance_up() {
        let budgets = vec![budget("2", None, None)];
        let counts = BTreeMap::from([
            (
                "a".to_owned(),
                PoolNodes {
                    total: 10,
                    disrupting: 1,
                },
            ),
            (
                "b".to_owned(),
                PoolNodes {
                    total: 10,
                    disrupting: 5,
                },
            ),
        ]);
        let pools = [
            ("a", budgets.as_slice()),
            ("b", budgets.as_slice()),
            ("c", budgets.as_slice()),
        ];
        let map = mapping(pools, &counts, DisruptionReason::Empty, NOW);
        assert_eq!(map["a"], 1);
        assert_eq!(map["b"], 0);
        assert_eq!(map["c"], 2);
    }

    proptest! {
        /// Whatever the budgets, the allowance never exceeds what any active budget naming
        /// the reason allows, and is the smallest of those.
        #[test]
        fn the_allowance_is_the_minimum_of_the_active_budgets(
            specs in proptest::collection::vec((0usize..30, any::<bool>(), 0u8..=100, any::<bool>(), 0usize..3), 0..6),
            nodes in 0usize..200,
            minutes in 0i64..(7 * 24 * 60),
        ) {
            let now = NOW + minutes * 60_000;
            let budgets: Vec<Budget> = specs
                .iter()
                .map(|(count, percent, p, scheduled, reason)| Budget {
                    nodes: if *percent { format!("{p}%") } else { count.to_string() },
                    schedule: scheduled.then(|| "0 */6 * * *".to_owned()),
                    duration: scheduled.then(|| "2h".to_owned()),
                    reasons: match reason {
                        0 => Vec::new(),
                        1 => vec![DisruptionReason::Empty],
                        _ => vec![DisruptionReason::Drifted, DisruptionReason::Underutilized],
                    },
                })
                .collect();
            let (got, errors) = allowed(&budgets, DisruptionReason::Empty, nodes, now);
            prop_assert!(errors.is_empty());
            let hour = (now / 3_600_000) % 24;
            let expected = specs
                .iter()
                .filter(|s| s.4 < 2)
                .filter(|s| !s.3 || hour % 6 < 2)
                .map(|(count, percent, p, _, _)| {
                    if *percent { (nodes * usize::from(*p)).div_ceil(100) } else { *count }
                })
                .min()
                .unwrap_or(UNLIMITED);
            prop_assert_eq!(got, expected);
        }
    }
}
