//! Passes and commands together, over random fleets, budgets and event orders: a model of
//! the disruption controller's loop (a pass, the command it starts, orchestration moving
//! every command on as replacements come up, fail or are slow, candidates draining and
//! going) checked after every step:
//! - the nodes of a pool being disrupted never exceed what its budgets allow;
//! - no candidate is deleted before every replacement of its command has initialized;
//! - no node is a candidate of two commands, and no replacement is one;
//! - a command given up leaves none of its candidates marked.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::budgets::{self, Nodes};
use super::orchestration::{self, Action, Command, Member, Phase, Seen};
use super::test_support::{MIN, NOW, base, node, pod, snapshot};
use super::{CommandRole, DriftMark, NodeSnapshot, Snapshot, pass};
use crate::api::nodepool::Budget;
use crate::events::NodeClaimState;

/// A NodeClaim of the model.
#[derive(Debug, Clone)]
struct Claim {
    snapshot: NodeSnapshot,
    /// Marked by a command (taint and condition).
    marked: bool,
    /// Steps until a replacement initializes (`None`: it fails).
    comes_in: Option<u8>,
    /// Steps until a deleting node is gone.
    gone_in: u8,
}

#[derive(Debug)]
struct Model {
    claims: BTreeMap<String, Claim>,
    commands: BTreeMap<u64, Command>,
    budget: Nodes,
    now_ms: i64,
    next: u64,
}

impl Model {
    fn snapshot(&self) -> Snapshot {
        let mut nodes: Vec<NodeSnapshot> = Vec::new();
        for (name, claim) in &self.claims {
            let mut n = claim.snapshot.clone();
            n.command = self.commands.values().find_map(|c| {
                if c.candidates.iter().any(|m| &m.nodeclaim == name) {
                    Some(CommandRole::Candidate)
                } else if c.replacements.contains(name) {
                    Some(CommandRole::Replacement)
                } else {
                    None
                }
            });
            nodes.push(n);
        }
        let mut s = snapshot(nodes);
        s.now_ms = self.now_ms;
        for p in &mut s.pools {
            p.budgets = vec![Budget {
                nodes: match self.budget {
                    Nodes::Count(n) => n.to_string(),
                    Nodes::Percent(p) => format!("{p}%"),
                },
                schedule: None,
                duration: None,
                reasons: Vec::new(),
            }];
        }
        s
    }

    fn seen(&self, command: &Command) -> BTreeMap<String, Seen> {
        command
            .candidates
            .iter()
            .map(|m| &m.nodeclaim)
            .chain(&command.replacements)
            .filter_map(|name| {
                let claim = self.claims.get(name)?;
                let seen = match claim.snapshot.state {
                    NodeClaimState::Initialized => Seen::Initialized,
                    NodeClaimState::Draining | NodeClaimState::Terminating => Seen::Deleting,
                    _ => Seen::Coming,
                };
                Some((name.clone(), seen))
            })
            .collect()
    }

    /// Carries out a command's actions, checking that nothing is deleted early.
    fn act(&mut self, id: u64, actions: Vec<Action>) -> Result<(), TestCaseError> {
        for action in actions {
            match action {
                Action::Taint(members) => self.mark(&members, true),
                Action::Untaint(members) => self.mark(&members, false),
                Action::Delete(names) => {
                    let command = &self.commands[&id];
                    for r in &command.replacements {
                        let ready = self
                            .claims
                            .get(r)
                            .is_some_and(|c| c.snapshot.state == NodeClaimState::Initialized);
                        prop_assert!(
                            ready,
                            "{names:?} deleted before replacement {r} initialized"
                        );
                    }
                    for name in names {
                        if let Some(c) = self.claims.get_mut(&name) {
                            c.snapshot.state = NodeClaimState::Draining;
                        }
                    }
                }
                Action::Enter(phase) => {
                    if let Phase::Abandoned(_) = &phase {
                        for m in &self.commands[&id].candidates {
                            let marked = self.claims.get(&m.nodeclaim).is_some_and(|c| {
                                c.marked && c.snapshot.state < NodeClaimState::Draining
                            });
                            prop_assert!(!marked, "{} left marked", m.nodeclaim);
                        }
                    }
                    if phase.ended() {
                        self.commands.remove(&id);
                    } else if let Some(c) = self.commands.get_mut(&id) {
                        c.phase = phase;
                    }
                }
                Action::ReportedWaiting => {
                    if let Some(c) = self.commands.get_mut(&id) {
                        c.waiting_reported = true;
                    }
                }
                Action::Emit { .. } => {}
            }
        }
        Ok(())
    }

    fn mark(&mut self, members: &[Member], marked: bool) {
        for m in members {
            if let Some(c) = self.claims.get_mut(&m.nodeclaim) {
                c.marked = marked;
            }
        }
    }

    /// Starts what a pass decided.
    fn start(
        &mut self,
        decision: pass::Decision,
        fates: &[Option<u8>],
    ) -> Result<(), TestCaseError> {
        let id = self.next;
        self.next += 1;
        let mut replacements = Vec::new();
        for (i, planned) in decision.replacements.iter().enumerate() {
            let name = format!("r{id}-{i}");
            let mut snapshot = node(&name, &planned.nodepool, Vec::new());
            snapshot.state = NodeClaimState::Launched;
            snapshot.initialized_ms = None;
            snapshot.ready = false;
            self.claims.insert(
                name.clone(),
                Claim {
                    snapshot,
                    marked: false,
                    comes_in: fates.get(i).copied().unwrap_or(Some(1)),
                    gone_in: 1,
                },
            );
            replacements.push(name);
        }
        let command = Command {
            id,
            method: decision.method,
            candidates: decision
                .candidates
                .iter()
                .map(|n| Member {
                    nodeclaim: n.clone(),
                    node: self.claims[n].snapshot.node.clone(),
                })
                .collect(),
            replacements,
            phase: Phase::WaitingReadiness,
            started_ms: self.now_ms,
            waiting_reported: false,
        };
        for m in &command.candidates {
            let others = self
                .commands
                .values()
                .any(|c| c.candidates.iter().any(|o| o.nodeclaim == m.nodeclaim));
            prop_assert!(!others, "{} is a candidate of two commands", m.nodeclaim);
            let replacement = self
                .commands
                .values()
                .any(|c| c.replacements.contains(&m.nodeclaim));
            prop_assert!(!replacement, "{} is a replacement in flight", m.nodeclaim);
        }
        self.commands.insert(id, command.clone());
        self.act(id, orchestration::start(&command))?;
        Ok(())
    }

    /// Time passes: replacements come up (or fail), deleting nodes go.
    fn tick(&mut self) {
        self.now_ms += MIN;
        let mut gone = Vec::new();
        for (name, claim) in &mut self.claims {
            match claim.snapshot.state {
                NodeClaimState::Launched => match &mut claim.comes_in {
                    Some(0) => {
                        claim.snapshot.state = NodeClaimState::Initialized;
                        claim.snapshot.ready = true;
                        claim.snapshot.initialized_ms = Some(self.now_ms);
                    }
                    Some(n) => *n -= 1,
                    None => gone.push(name.clone()),
                },
                NodeClaimState::Draining => {
                    if claim.gone_in == 0 {
                        gone.push(name.clone());
                    } else {
                        claim.gone_in -= 1;
                    }
                }
                _ => {}
            }
        }
        for name in gone {
            self.claims.remove(&name);
        }
    }

    /// The budget invariant: per pool, nodes disrupting at most what the budget allows.
    fn check_budgets(&self) -> Result<(), TestCaseError> {
        let s = self.snapshot();
        let counts = pass::pool_counts(&s);
        for (pool, count) in counts {
            let allowed = budgets::allowed(
                &s.pool(&pool).unwrap().budgets,
                budgets::ALL_REASONS[0],
                count.total,
                s.now_ms,
            )
            .0;
            prop_assert!(
                count.disrupting <= allowed,
                "pool {pool}: {} of {} nodes disrupting, {allowed} allowed",
                count.disrupting,
                count.total
            );
        }
        Ok(())
    }
}

fn fleet() -> impl Strategy<Value = (Vec<(usize, bool, bool)>, Nodes)> {
    (
        prop::collection::vec((0usize..4, any::<bool>(), any::<bool>()), 1..14),
        prop_oneof![
            (1usize..4).prop_map(Nodes::Count),
            (1u8..60).prop_map(Nodes::Percent)
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn commands_stay_within_budgets_and_drain_only_after_their_replacements(
        (spec, budget) in fleet(),
        fates in prop::collection::vec(prop::option::weighted(0.8, 0u8..4), 40),
    ) {
        // Each node: pods that would move, drifted or not, and whether it has room for one
        // more pod (moved pods that find no room need replacements, several for a big node).
        let mut claims = BTreeMap::new();
        let mut roomy = std::collections::BTreeSet::new();
        for (i, (pods, drifted, room)) in spec.iter().enumerate() {
            if *room {
                roomy.insert(format!("n{i:02}"));
            }
            let name = format!("n{i:02}");
            let mut n = node(&name, "default", (0..*pods).map(|p| pod(&format!("{name}-p{p}"), true)).collect());
            if *drifted {
                n.drifted = Some(DriftMark { reason: "NodePoolDrifted".into(), since_ms: NOW - i as i64 * MIN });
            }
            claims.insert(name, Claim { snapshot: n, marked: false, comes_in: Some(0), gone_in: 1 });
        }
        let mut model = Model { claims, commands: BTreeMap::new(), budget, now_ms: NOW, next: 1 };
        let mut fates = fates.into_iter();
        for _ in 0..30 {
            let s = model.snapshot();
            // Room for moved pods on the nodes not drifted (1 CPU free each), and new nodes.
            let room: Vec<(String, i64)> = s
                .nodes
                .iter()
                .filter(|n| n.drifted.is_none() && n.state == NodeClaimState::Initialized)
                .filter(|n| roomy.contains(&n.nodeclaim))
                .map(|n| (n.nodeclaim.clone(), 1))
                .collect();
            let refs: Vec<(&str, i64)> = room.iter().map(|(n, c)| (n.as_str(), *c)).collect();
            // Only types that hold one pod: a node's pods that move need one replacement each.
            let mut base = base("default", &refs);
            for pool in &mut base.nodepools {
                pool.instance_types.retain(|t| t.name == "small");
            }
            let result = pass::run(&s, Some(&base));
            if let Some(decision) = result.command {
                let fate: Vec<Option<u8>> = (0..decision.replacements.len()).map(|_| fates.next().flatten()).collect();
                model.start(decision, &fate)?;
            }
            model.check_budgets()?;
            model.tick();
            let ids: Vec<u64> = model.commands.keys().copied().collect();
            for id in ids {
                let command = model.commands[&id].clone();
                let seen = model.seen(&command);
                let actions = orchestration::advance(&command, &seen, model.now_ms);
                model.act(id, actions)?;
            }
            model.check_budgets()?;
        }
    }
}
