//! Upstream Karpenter's performance suite (`test/suites/performance` in kubernetes-sigs/
//! karpenter, main), case by case: the Deployments each creates, how it scales them, and the
//! bounds upstream's test asserts on each phase's report. Replica counts are multiplied by
//! `--scale` (at least one pod each).

use std::time::Duration;

/// A case of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// 500 × 950m/3900Mi and 500 × 3800m/31Gi, then both to 350.
    Basic,
    /// 500 × 900m/3100Mi (hostname spread), 500 × 3500m/28Gi and 100 × 900m/450Mi
    /// do-not-disrupt, then the first two to 250.
    DoNotDisrupt,
    /// 300 × 900m/3100Mi (hostname spread) and 300 × 3500m/28Gi, then the NodePool's
    /// template changes: every node drifts.
    Drift,
    /// 500 × 900m/3100Mi (hostname spread) and 500 × 3500m/28Gi, then both to 350.
    HostNameSpreading,
    /// 1,000 × 950m/3900Mi (hostname spread) and 1,000 × 3800m/31Gi, then both to 700.
    HostNameSpreadingXl,
    /// 500 × 950m/3900Mi with hostname anti-affinity; then it goes to 250 while 500 ×
    /// 3800m/31Gi (anti-affinity too) come; then 400 and 200.
    Interference,
    /// 30 Deployments (1,000 pods) of varied sizes, zone spread, three with hostname
    /// anti-affinity and three with hostname spread, then 700 pods.
    WideDeployments,
}

/// A Deployment of the case.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name (and `app` label).
    pub name: String,
    /// Replicas at the start (before `--scale`).
    pub replicas: u32,
    /// CPU request.
    pub cpu: &'static str,
    /// Memory request.
    pub memory: &'static str,
    /// A hostname topology spread (maxSkew 1, DoNotSchedule).
    pub hostname_spread: bool,
    /// A zone topology spread (maxSkew 1, DoNotSchedule).
    pub zone_spread: bool,
    /// Required anti-affinity to its own pods on a hostname.
    pub anti_affinity: bool,
    /// `karpenter.sh/do-not-disrupt: "true"` on its pods.
    pub do_not_disrupt: bool,
}

impl Workload {
    fn new(name: &str, replicas: u32, cpu: &'static str, memory: &'static str) -> Workload {
        Workload {
            name: name.to_owned(),
            replicas,
            cpu,
            memory,
            hostname_spread: false,
            zone_spread: false,
            anti_affinity: false,
            do_not_disrupt: false,
        }
    }

    fn spread(mut self) -> Workload {
        self.hostname_spread = true;
        self
    }

    fn anti(mut self) -> Workload {
        self.anti_affinity = true;
        self
    }
}

/// What a step does before its phase is measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Creates these Deployments.
    Create(Vec<Workload>),
    /// Sets Deployments' replicas (before `--scale`).
    Scale(Vec<(String, u32)>),
    /// Changes the NodePool's template (an annotation), so every node drifts.
    Drift,
    /// These, in order.
    All(Vec<Action>),
}

/// How a phase is judged, as upstream's report functions wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseKind {
    /// Until the pods are running (`ReportScaleOut`).
    ScaleOut,
    /// Until the pods are running and no node has drained for the quiet window
    /// (`ReportConsolidation`).
    Consolidation,
    /// Until no node has drained for the drift quiet window and the pods run (`ReportDrift`).
    Drift,
}

/// Upstream's assertions on a phase (`None`: not asserted).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bounds {
    /// The phase takes less than this.
    pub time: Option<Duration>,
    /// Fewer nodes than this at its end.
    pub nodes: Option<usize>,
    /// Reserved CPU utilisation above this.
    pub cpu: Option<f64>,
    /// Reserved memory utilisation above this.
    pub memory: Option<f64>,
}

/// A step: an action, then a phase measured until it settles.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its name in the report.
    pub name: &'static str,
    /// What starts it.
    pub action: Action,
    /// How it ends.
    pub kind: PhaseKind,
    /// Pods running at its end (before `--scale`).
    pub pods: u32,
    /// How long upstream's test waits for it.
    pub timeout: Duration,
    /// Upstream's bounds.
    pub bounds: Bounds,
}

const fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

fn bounds(time: u64, nodes: Option<usize>, cpu: Option<f64>, memory: Option<f64>) -> Bounds {
    Bounds {
        time: Some(minutes(time)),
        nodes,
        cpu,
        memory,
    }
}

fn scale(pairs: &[(&str, u32)]) -> Action {
    Action::Scale(pairs.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect())
}

impl Case {
    /// Its steps.
    pub fn steps(self) -> Vec<Step> {
        use PhaseKind::{Consolidation, ScaleOut};
        let step = |name, action, kind, pods, timeout, bounds| Step {
            name,
            action,
            kind,
            pods,
            timeout: minutes(timeout),
            bounds,
        };
        match self {
            Case::Basic => vec![
                step(
                    "scale-out",
                    Action::Create(vec![
                        Workload::new("small-resource-app", 500, "950m", "3900Mi"),
                        Workload::new("large-resource-app", 500, "3800m", "31Gi"),
                    ]),
                    ScaleOut,
                    1000,
                    15,
                    bounds(2, Some(200), Some(0.85), Some(0.75)),
                ),
                step(
                    "consolidation",
                    scale(&[("small-resource-app", 350), ("large-resource-app", 350)]),
                    Consolidation,
                    700,
                    20,
                    bounds(15, None, None, None),
                ),
            ],
            Case::DoNotDisrupt => {
                let mut protected = Workload::new("do-not-disrupt-app", 100, "900m", "450Mi");
                protected.do_not_disrupt = true;
                vec![
                    step(
                        "scale-out",
                        Action::Create(vec![
                            Workload::new("small-resource-app", 500, "900m", "3100Mi").spread(),
                            Workload::new("large-resource-app", 500, "3500m", "28Gi"),
                            protected,
                        ]),
                        ScaleOut,
                        1100,
                        15,
                        bounds(4, None, Some(0.38), Some(0.40)),
                    ),
                    step(
                        "consolidation",
                        scale(&[("small-resource-app", 250), ("large-resource-app", 250)]),
                        Consolidation,
                        600,
                        25,
                        bounds(20, None, Some(0.38), Some(0.55)),
                    ),
                ]
            }
            Case::Drift => vec![
                step(
                    "scale-out",
                    Action::Create(vec![
                        Workload::new("hostname-spread-app", 300, "900m", "3100Mi").spread(),
                        Workload::new("standard-app", 300, "3500m", "28Gi"),
                    ]),
                    ScaleOut,
                    600,
                    20,
                    bounds(5, None, None, None),
                ),
                step(
                    "drift",
                    Action::Drift,
                    PhaseKind::Drift,
                    600,
                    30,
                    bounds(50, None, None, None),
                ),
            ],
            Case::HostNameSpreading => vec![
                step(
                    "scale-out",
                    Action::Create(vec![
                        Workload::new("small-resource-app", 500, "900m", "3100Mi").spread(),
                        Workload::new("large-resource-app", 500, "3500m", "28Gi"),
                    ]),
                    ScaleOut,
                    1000,
                    15,
                    bounds(5, None, Some(0.38), Some(0.40)),
                ),
                step(
                    "consolidation",
                    scale(&[("small-resource-app", 350), ("large-resource-app", 350)]),
                    Consolidation,
                    700,
                    30,
                    Bounds {
                        cpu: Some(0.38),
                        memory: Some(0.40),
                        ..Bounds::default()
                    },
                ),
            ],
            Case::HostNameSpreadingXl => vec![
                step(
                    "scale-out",
                    Action::Create(vec![
                        Workload::new("small-resource-app", 1000, "950m", "3900Mi").spread(),
                        Workload::new("large-resource-app", 1000, "3800m", "31Gi"),
                    ]),
                    ScaleOut,
                    2000,
                    20,
                    bounds(10, Some(1200), Some(0.55), Some(0.70)),
                ),
                step(
                    "consolidation",
                    scale(&[("small-resource-app", 700), ("large-resource-app", 700)]),
                    Consolidation,
                    1400,
                    25,
                    bounds(10, None, Some(0.55), Some(0.70)),
                ),
            ],
            Case::Interference => vec![
                step(
                    "scale-out",
                    Action::Create(vec![
                        Workload::new("small-resource-app", 500, "950m", "3900Mi").anti(),
                    ]),
                    ScaleOut,
                    500,
                    15,
                    bounds(5, Some(650), Some(0.55), Some(0.75)),
                ),
                step(
                    "interference",
                    Action::All(vec![
                        scale(&[("small-resource-app", 250)]),
                        Action::Create(vec![
                            Workload::new("large-resource-app", 500, "3800m", "31Gi").anti(),
                        ]),
                    ]),
                    ScaleOut,
                    750,
                    5,
                    bounds(10, None, Some(0.55), Some(0.75)),
                ),
                step(
                    "consolidation",
                    scale(&[("small-resource-app", 400), ("large-resource-app", 200)]),
                    Consolidation,
                    600,
                    15,
                    bounds(15, None, Some(0.55), Some(0.75)),
                ),
            ],
            Case::WideDeployments => vec![
                step(
                    "scale-out",
                    Action::Create(wide(false)),
                    ScaleOut,
                    1000,
                    20,
                    bounds(3, Some(300), Some(0.68), Some(0.55)),
                ),
                step(
                    "consolidation",
                    Action::Scale(
                        wide(true)
                            .into_iter()
                            .map(|w| (w.name, w.replicas))
                            .collect(),
                    ),
                    Consolidation,
                    700,
                    25,
                    bounds(10, None, Some(0.65), Some(0.65)),
                ),
            ],
        }
    }
}

/// The thirty Deployments of `wideDeployments`, at their start or their scaled-in replicas.
fn wide(scaled_in: bool) -> Vec<Workload> {
    const CPU: [&str; 30] = [
        "250m", "500m", "750m", "1000m", "1500m", "2000m", "2500m", "3000m", "3500m", "4000m",
        "2500m", "1000m", "1500m", "3000m", "1800m", "2000m", "3500m", "4000m", "250m", "500m",
        "750m", "1000m", "1500m", "2000m", "2500m", "3000m", "3500m", "4000m", "3500m", "3000m",
    ];
    const MEMORY: [&str; 30] = [
        "300Mi", "500Mi", "750Mi", "1Gi", "2Gi", "4Gi", "8Gi", "4Gi", "16Gi", "10Gi", "64Gi",
        "30Gi", "32Gi", "32Gi", "30Gi", "20Gi", "30Gi", "300Mi", "500Mi", "750Mi", "1Gi", "2Gi",
        "4Gi", "8Gi", "16Gi", "32Gi", "28Gi", "64Gi", "13Gi", "24Gi",
    ];
    (0..30)
        .map(|i| {
            let replicas = match (i < 20, scaled_in) {
                (true, false) => 35,
                (false, false) => 30,
                (true, true) => 25,
                (false, true) => 20,
            };
            let mut w = Workload::new(
                &format!("wide-deployment-{}", i + 1),
                replicas,
                CPU[i],
                MEMORY[i],
            );
            w.zone_spread = true;
            w.anti_affinity = i < 3;
            w.hostname_spread = (3..6).contains(&i);
            w
        })
        .collect()
}

/// `replicas` scaled by `factor`, at least one.
pub fn scaled(replicas: u32, factor: f64) -> u32 {
    ((f64::from(replicas) * factor).round() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(action: &Action, replicas: &mut std::collections::BTreeMap<String, u32>, case: Case) {
        match action {
            Action::Create(ws) => {
                for w in ws {
                    replicas.insert(w.name.clone(), w.replicas);
                }
            }
            Action::Scale(s) => {
                for (name, r) in s {
                    assert!(replicas.contains_key(name), "{case:?}: {name}");
                    replicas.insert(name.clone(), *r);
                }
            }
            Action::Drift => {}
            Action::All(actions) => {
                for a in actions {
                    apply(a, replicas, case);
                }
            }
        }
    }

    #[test]
    fn each_case_creates_the_pods_its_phases_expect() {
        for case in [
            Case::Basic,
            Case::DoNotDisrupt,
            Case::Drift,
            Case::HostNameSpreading,
            Case::HostNameSpreadingXl,
            Case::Interference,
            Case::WideDeployments,
        ] {
            let mut replicas = std::collections::BTreeMap::new();
            for step in case.steps() {
                apply(&step.action, &mut replicas, case);
                assert_eq!(
                    replicas.values().sum::<u32>(),
                    step.pods,
                    "{case:?} {}",
                    step.name
                );
            }
        }
        assert_eq!(scaled(500, 0.1), 50);
        assert_eq!(scaled(1, 0.1), 1);
    }
}
