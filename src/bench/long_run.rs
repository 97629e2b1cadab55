//! `karpenter bench long-run`: the controller on the simulator for days of virtual time, with
//! the workload changing every few minutes, to show that the journal and the process's memory
//! level off (the journal keeper's snapshots and retention) instead of growing with the run.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;

use crate::report::run::{Report, Sample};
use crate::sim::run::{CloudChoice, RunOptions};
use crate::sim::scenario;

/// The largest journal the issue's target allows after a week, bytes.
pub const JOURNAL_TARGET: u64 = 200 * 1000 * 1000;
/// The largest resident memory the target allows, bytes.
pub const RSS_TARGET: u64 = 150 * 1000 * 1000;

/// What to run.
#[derive(Debug, Clone)]
pub struct LongRun {
    /// Simulated time.
    pub duration: Duration,
    /// Seed of the workload's changes.
    pub seed: u64,
    /// How often the workload changes.
    pub step: Duration,
    /// Where the journal goes: a new directory (the caller replaces an old journal there,
    /// [`crate::system::journal_dir::RunJournal`]).
    pub journal_dir: std::path::PathBuf,
    /// Journal snapshots and retention.
    pub keeping: karpenter_actors::actor::keeper::JournalKeeping,
}

/// The NodePools, node class and workload of the run: a general-purpose pool (spot and
/// on-demand, consolidating, nodes expiring daily) and a spot batch pool.
const BASE: &str = r#"name: long-run
duration: DURATION
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata:
    name: default
  spec:
    role: KarpenterNodeRole-sim
    amiSelectorTerms:
      - alias: al2023@latest
    subnetSelectorTerms:
      - tags: {karpenter.sh/discovery: sim}
    securityGroupSelectorTerms:
      - tags: {karpenter.sh/discovery: sim}
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata:
    name: general-purpose
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        expireAfter: 24h
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
          - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
          - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["17"]}
    disruption:
      consolidateAfter: 1m
      budgets:
        - nodes: "20%"
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata:
    name: batch
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        taints:
          - {key: workload-class, value: batch, effect: NoSchedule}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
          - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
    disruption:
      consolidateAfter: 0s
daemonsets:
  - name: node-exporter
    cpu: 100m
    memory: 128Mi
    tolerations: ["*"]
deployments:
  - name: web
    cpu: 500m
    memory: 1Gi
    replicas: 10
    labels: {app: web}
    maxUnavailable: 2
    topologySpread:
      - {topologyKey: topology.kubernetes.io/zone, maxSkew: 1}
  - name: api
    cpu: "1"
    memory: 2Gi
    replicas: 4
    labels: {app: api}
    maxUnavailable: 1
timeline:
"#;

/// The scenario: [`BASE`] and a timeline that scales `web` every `step` (a daily wave with
/// seeded noise, 5 to 60 replicas), `api` every hour, starts a batch job every three hours,
/// interrupts a spot node every eight and releases a new image every two days.
pub fn scenario_text(run: &LongRun) -> String {
    let mut text = BASE.replace("DURATION", &format!("{}s", run.duration.as_secs()));
    let mut rng = fastrand::Rng::with_seed(run.seed);
    let step = run.step.as_secs().max(60);
    let day = 24 * 3600;
    let mut at = step;
    while at < run.duration.as_secs() {
        let phase = (at % day) as f64 / day as f64 * std::f64::consts::TAU;
        let wave = 32.0 - 25.0 * phase.cos();
        let replicas = (wave + rng.f64() * 10.0 - 5.0).clamp(5.0, 60.0) as usize;
        let _ = writeln!(
            text,
            "  - at: {at}s\n    scale: {{deployment: web, replicas: {replicas}}}"
        );
        if at % 3600 < step {
            let replicas = rng.usize(2..=8);
            let _ = writeln!(
                text,
                "  - at: {at}s\n    scale: {{deployment: api, replicas: {replicas}}}"
            );
        }
        if at % (3 * 3600) < step {
            let pods = rng.usize(10..=60);
            let _ = writeln!(
                text,
                "  - at: {at}s\n    job: {{name: batch-{at}, cpu: \"1\", memory: 2Gi, replicas: {pods}, runFor: 20m, tolerations: [workload-class], nodeSelector: {{karpenter.sh/nodepool: batch}}}}"
            );
        }
        if at % (8 * 3600) < step {
            let _ = writeln!(
                text,
                "  - at: {at}s\n    interrupt: {{nodepool: general-purpose, count: 1}}"
            );
        }
        if at % (2 * day) < step && at > step {
            let _ = writeln!(text, "  - at: {at}s\n    amiRelease: {{}}");
        }
        at += step;
    }
    text
}

/// Runs the scenario and returns its report (its samples carry the journal's size and the
/// resident memory).
pub fn run(run: &LongRun) -> anyhow::Result<Report> {
    let scenario = scenario::parse(&scenario_text(run), "long-run scenario")?;
    anyhow::ensure!(
        !run.journal_dir.exists(),
        "{} exists: the long run starts a journal of its own",
        run.journal_dir.display()
    );
    let settings = karpenter_actors::actor::Settings {
        keeping: run.keeping,
        ..Default::default()
    };
    let options = RunOptions {
        journal_dir: run.journal_dir.clone(),
        progress: crate::progress::Progress::Off,
        settings,
        scope: "long-run".into(),
        admin: None,
        pace: None,
        resume: false,
        cloud: CloudChoice::Sim,
        gc: Default::default(),
        measure: true,
    };
    crate::sim::run::run(&scenario, &options)
}

/// The samples to print: one every `every` of simulated time, and the last.
pub fn rows(samples: &[Sample], every: Duration) -> Vec<Sample> {
    let every = every.as_secs().max(1);
    let mut out: Vec<Sample> = samples
        .iter()
        .filter(|s| s.at_seconds % every == 0)
        .copied()
        .collect();
    if let Some(last) = samples.last()
        && out.last().is_none_or(|s| s.at_seconds != last.at_seconds)
    {
        out.push(*last);
    }
    out
}

/// What the journal keeper's retention removed over a run: every event before the first one
/// still stored (sequence numbers have no gaps), and the bytes of the last cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Events removed.
    pub events: u64,
    /// Events still stored.
    pub kept: u64,
}

/// Reads how much of the journal in `dir` retention removed.
pub fn trimmed(dir: &std::path::Path) -> anyhow::Result<Trimmed> {
    use karpenter_core::events::DomainEvent;
    let journal = karpenter_journal::Journal::<DomainEvent>::open(dir)
        .with_context(|| format!("cannot open the journal in {}", dir.display()))?;
    let first = journal.first_seq()?.unwrap_or(1);
    let last = journal.last_seq()?.unwrap_or(0);
    Ok(Trimmed {
        events: first.saturating_sub(1),
        kept: (last + 1).saturating_sub(first),
    })
}

/// The largest journal size and resident memory over `samples`, each with when it was
/// reached (simulated seconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peaks {
    /// Journal bytes on disk, and when.
    pub journal: (u64, u64),
    /// Resident bytes, and when.
    pub rss: (u64, u64),
}

/// The median resident memory over the samples from `from_seconds` of simulated time on
/// (the level it settles at, apart from short peaks); `None` without such samples.
pub fn rss_median(samples: &[Sample], from_seconds: u64) -> Option<u64> {
    let mut rss: Vec<u64> = samples
        .iter()
        .filter(|s| s.at_seconds >= from_seconds)
        .filter_map(|s| s.rss_bytes)
        .collect();
    rss.sort_unstable();
    rss.get(rss.len() / 2).copied()
}

/// The peaks over `samples` (the first sample reaching a peak names its time).
pub fn peaks(samples: &[Sample]) -> Peaks {
    let peak = |value: fn(&Sample) -> Option<u64>| {
        samples
            .iter()
            .filter_map(|s| value(s).map(|v| (v, s.at_seconds)))
            .fold(
                (0, 0),
                |best, (v, at)| if v > best.0 { (v, at) } else { best },
            )
    };
    Peaks {
        journal: peak(|s| s.journal_bytes),
        rss: peak(|s| s.rss_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_scenario_parses_and_changes_the_workload_every_step() {
        let run = LongRun {
            duration: Duration::from_secs(2 * 24 * 3600 + 600),
            seed: 3,
            step: Duration::from_secs(300),
            journal_dir: "unused".into(),
            keeping: Default::default(),
        };
        let text = scenario_text(&run);
        let scenario = scenario::parse(&text, "test").unwrap();
        let steps = &scenario.file.timeline;
        let scales = steps
            .iter()
            .filter(|s| matches!(&s.action, scenario::Action::Scale { deployment, .. } if deployment == "web"))
            .count();
        assert_eq!(scales, (2 * 24 * 3600 + 600) / 300 - 1);
        assert!(
            steps
                .iter()
                .any(|s| matches!(s.action, scenario::Action::AmiRelease { .. }))
        );
        assert!(
            steps
                .iter()
                .any(|s| matches!(s.action, scenario::Action::Interrupt { .. }))
        );
        assert_eq!(
            text,
            scenario_text(&run),
            "the same seed gives the same scenario"
        );
    }

    #[test]
    fn peaks_name_when_they_were_reached_and_the_median_leaves_out_the_first_day() {
        let sample = |at_seconds: u64, journal: u64, rss: Option<u64>| Sample {
            at_seconds,
            cost_per_hour: 0.0,
            nodes: 0,
            cpu_utilisation: 0.0,
            pods_pending: 0,
            journal_bytes: Some(journal),
            rss_bytes: rss,
        };
        let day = 24 * 3600;
        let samples = [
            sample(0, 1, Some(500)),
            sample(day, 7, Some(100)),
            sample(day + 60, 9, Some(300)),
            sample(day + 120, 9, Some(120)),
            sample(day + 180, 2, None),
        ];
        let peaks = peaks(&samples);
        assert_eq!(peaks.journal, (9, day + 60), "the first sample at the peak");
        assert_eq!(peaks.rss, (500, 0));
        assert_eq!(rss_median(&samples, day), Some(120));
        assert_eq!(rss_median(&samples, 2 * day), None);
    }
}
