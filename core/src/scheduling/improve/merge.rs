//! Merging planned NodeClaims with the same NodePool and requirements when one instance type
//! for their pods costs less than they do (daemonset and system overhead paid once, or a
//! larger type cheaper per unit), cheapest claims first: pairs, then groups of up to
//! [`GROUP_MAX`] where no pair saved (the plan without the groups is kept when, shrunk the
//! same way, it ends cheaper).

use std::collections::BTreeMap;

use crate::model::Resources;

use super::super::claims::Plan;
use super::super::table::{PRICE_EPSILON, RequirementTable};
use super::super::topology::Topology;
use super::{Improve, Moves, launchable};

/// Partners tried per claim when merging.
const MERGE_PARTNERS: usize = 8;

/// Claims merged into one at most when no pair saves.
const GROUP_MAX: usize = 4;

impl Improve<'_> {
    pub(super) fn merge_claims(&mut self) {
        for members in self.groups() {
            while self.merge_pass(&members) {}
        }
    }

    /// The claims of `members` that hold pods, cheapest first.
    fn by_price(&self, members: &[usize]) -> Vec<usize> {
        let claims = &self.plan.claims;
        let mut by_price: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| !claims.all[i].pods.is_empty())
            .collect();
        by_price.sort_by(|a, b| {
            claims.all[*a].types[0]
                .price
                .total_cmp(&claims.all[*b].types[0].price)
                .then(a.cmp(b))
        });
        by_price
    }

    /// The claims of each class (NodePool, requirements, whether exotic types are allowed).
    fn groups(&self) -> Vec<Vec<usize>> {
        let mut groups: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
        for (i, claim) in self.plan.claims.all.iter().enumerate() {
            groups
                .entry((claim.pool, claim.requirements, claim.exotic_ok))
                .or_default()
                .push(i);
        }
        groups.into_values().collect()
    }

    /// One pass over a group: each claim, cheapest first, merges into the first of its next
    /// cheapest partners that takes it. Whether any merged.
    fn merge_pass(&mut self, members: &[usize]) -> bool {
        let by_price = self.by_price(members);
        let mut merged_any = false;
        let mut gone = vec![false; self.plan.claims.all.len()];
        for (position, &small) in by_price.iter().enumerate() {
            if gone[small] {
                continue;
            }
            let partners = next_partners(&by_price[position + 1..], &gone);
            for &into in &partners {
                let worth = {
                    let (moves, table) = self.split();
                    let first = moves.claims.all[small].pods[0];
                    moves.may_join(first, into) && moves.merge_saves(table, &[small], into)
                };
                if worth && self.merge_into(small, into) {
                    gone[small] = true;
                    gone[into] = true;
                    merged_any = true;
                    break;
                }
            }
        }
        merged_any
    }

    /// After the pairs: each claim, cheapest first, merged with its next partners as one
    /// group where that saves. The plan as it was before the first group merged, if any did.
    pub(super) fn merge_groups(&mut self) -> Option<(Plan, Topology)> {
        let mut before = None;
        for members in self.groups() {
            let by_price = self.by_price(&members);
            let mut gone = vec![false; self.plan.claims.all.len()];
            for (position, &small) in by_price.iter().enumerate() {
                if gone[small] {
                    continue;
                }
                let partners = next_partners(&by_price[position + 1..], &gone);
                let Some((group, into)) = self.best_group(small, &partners) else {
                    continue;
                };
                if before.is_none() {
                    before = Some((self.plan.clone(), self.topology.clone()));
                }
                if self.merge_group(&group, into) {
                    for member in group.into_iter().chain([into]) {
                        gone[member] = true;
                    }
                }
            }
        }
        before
    }

    /// `small` and its next partners as one group, the one that saves most of up to
    /// [`GROUP_MAX`] claims: a type two pods' worth larger can cost more than two small ones
    /// while one three pods' worth larger costs less than three (pods heavy in memory, one
    /// per 4-vCPU memory-rich type or three per 16-vCPU r-class type), which no pair finds.
    /// The claims to move and the one they move into, if any group saves.
    fn best_group(&mut self, small: usize, partners: &[usize]) -> Option<(Vec<usize>, usize)> {
        // Each pod is checked again as it moves (`merge_group`); a partner `small`'s first
        // pod cannot join is not tried.
        let joinable: Vec<usize> = {
            let moves = self.moves();
            let first = moves.claims.all[small].pods[0];
            partners
                .iter()
                .copied()
                .filter(|&p| moves.may_join(first, p))
                .take(GROUP_MAX - 1)
                .collect()
        };
        let mut best: Option<(f64, usize)> = None;
        for end in 2..=joinable.len() {
            let (moves, table) = self.split();
            let into = joinable[end - 1];
            let mut sources = vec![small];
            sources.extend_from_slice(&joinable[..end - 1]);
            if let Some(saving) = moves.group_saving(table, &sources, into)
                && best.is_none_or(|(b, _)| saving > b)
            {
                best = Some((saving, end));
            }
        }
        let (_, end) = best?;
        let mut group = vec![small];
        group.extend_from_slice(&joinable[..end - 1]);
        Some((group, joinable[end - 1]))
    }

    /// Moves every pod of `sources` onto `into` if each may join and the claim stays
    /// launchable (undoing every move otherwise).
    fn merge_group(&mut self, sources: &[usize], into: usize) -> bool {
        let mut moved = Vec::new();
        for &from in sources {
            let pods = self.plan.claims.all[from].pods.clone();
            for pod in pods {
                let fits = self.moves().may_join(pod, into);
                if fits {
                    self.move_pod(pod, from, into);
                    moved.push((pod, from));
                }
                if !fits || !launchable(self.input, &self.plan.table, &self.plan.claims.all[into]) {
                    for &(back, from) in moved.iter().rev() {
                        self.move_pod(back, into, from);
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Moves every pod of `from` onto `into` if each may join (undoing the moves otherwise).
    fn merge_into(&mut self, from: usize, into: usize) -> bool {
        let pods = self.plan.claims.all[from].pods.clone();
        let mut moved = Vec::new();
        for pod in pods {
            if self.moves().may_join(pod, into) {
                self.move_pod(pod, from, into);
                moved.push(pod);
                // Limits may leave no type for the two together (the source still reserves
                // its own until it empties), or too few for minValues.
                if launchable(self.input, &self.plan.table, &self.plan.claims.all[into]) {
                    continue;
                }
            }
            for &back in moved.iter().rev() {
                self.move_pod(back, into, from);
            }
            return false;
        }
        true
    }
}

/// The first [`MERGE_PARTNERS`] of `rest` not merged yet.
fn next_partners(rest: &[usize], gone: &[bool]) -> Vec<usize> {
    rest.iter()
        .copied()
        .filter(|p| !gone[*p])
        .take(MERGE_PARTNERS)
        .collect()
}

impl Moves<'_> {
    /// Whether one claim holding the pods of `sources` and `into` costs less than they do.
    fn merge_saves(&self, table: &mut RequirementTable, sources: &[usize], into: usize) -> bool {
        self.group_saving(table, sources, into).is_some()
    }

    /// What one claim holding the pods of `sources` and `into` saves on their prices, when it
    /// saves anything.
    fn group_saving(
        &self,
        table: &mut RequirementTable,
        sources: &[usize],
        into: usize,
    ) -> Option<f64> {
        let target = &self.claims.all[into];
        let state = &self.pool_states[target.pool];
        let pool = &self.input.nodepools[target.pool];
        let (mut requests, mut credit, mut price) =
            (target.requests, target.reserved, target.types[0].price);
        for &from in sources {
            let source = &self.claims.all[from];
            // A source's daemonset overhead is not needed twice.
            requests = requests.add(&source.requests.sub(&state.daemon).max(&Resources::ZERO));
            credit = credit.add(&source.reserved);
            price += source.types[0].price;
        }
        let priced = table.priced_types(pool, target.pool, state, target.requirements);
        let merged = priced.iter().find(|t| {
            (target.exotic_ok || !state.exotic[t.index])
                && requests.fits_in(&state.allocatable[t.index])
                && state.within_headroom(&pool.instance_types[t.index].capacity, &credit)
        })?;
        let saving = price - merged.price;
        (saving > PRICE_EPSILON).then_some(saving)
    }
}
