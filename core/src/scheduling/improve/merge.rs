//! Merging pairs of planned NodeClaims with the same NodePool and requirements when one
//! instance type for both pods costs less than the two (daemonset and system overhead paid
//! once, or a larger type cheaper per unit), cheapest claims first.

use std::collections::BTreeMap;

use crate::model::Resources;

use super::super::table::{PRICE_EPSILON, RequirementTable};
use super::{Improve, Moves, launchable};

/// Partners tried per claim when merging.
const MERGE_PARTNERS: usize = 8;

impl Improve<'_> {
    pub(super) fn merge_claims(&mut self) {
        let mut groups: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
        for (i, claim) in self.plan.claims.all.iter().enumerate() {
            groups
                .entry((claim.pool, claim.requirements, claim.exotic_ok))
                .or_default()
                .push(i);
        }
        for members in groups.into_values() {
            while self.merge_pass(&members) {}
        }
    }

    /// One pass over a group: each claim, cheapest first, merges into the first of its next
    /// cheapest partners that takes it. Whether any merged.
    fn merge_pass(&mut self, members: &[usize]) -> bool {
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
        let mut merged_any = false;
        let mut gone = vec![false; claims.all.len()];
        for (position, &small) in by_price.iter().enumerate() {
            if gone[small] {
                continue;
            }
            let partners = by_price[position + 1..]
                .iter()
                .copied()
                .filter(|p| !gone[*p])
                .take(MERGE_PARTNERS)
                .collect::<Vec<_>>();
            for into in partners {
                let worth = {
                    let (moves, table) = self.split();
                    let first = moves.claims.all[small].pods[0];
                    moves.may_join(first, into) && moves.merge_saves(table, small, into)
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

impl Moves<'_> {
    /// Whether one claim holding the pods of both costs less than the two.
    fn merge_saves(&self, table: &mut RequirementTable, from: usize, into: usize) -> bool {
        let (source, target) = (&self.claims.all[from], &self.claims.all[into]);
        let state = &self.pool_states[target.pool];
        let pool = &self.input.nodepools[target.pool];
        // The source's daemonset overhead is not needed twice.
        let requests = target
            .requests
            .add(&source.requests.sub(&state.daemon).max(&Resources::ZERO));
        let credit = target.reserved.add(&source.reserved);
        let priced = table.priced_types(pool, target.pool, state, target.requirements);
        let Some(merged) = priced.iter().find(|t| {
            (target.exotic_ok || !state.exotic[t.index])
                && requests.fits_in(&state.allocatable[t.index])
                && state.within_headroom(&pool.instance_types[t.index].capacity, &credit)
        }) else {
            return false;
        };
        merged.price + PRICE_EPSILON < source.types[0].price + target.types[0].price
    }
}
