//! The `karpenter` binary as a user runs it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run karpenter")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `journal verify` on `journal`, which must succeed; its output.
fn verified(journal: &str) -> String {
    let verify = karpenter(&["journal", "verify", journal]);
    let text = stdout(&verify);
    assert!(verify.status.success(), "{text}");
    text
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crds_output_equals_the_checked_in_files() {
    let output = karpenter(&["crds"]);
    assert!(output.status.success());
    let printed = stdout(&output);
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    for file in &files {
        let checked_in = std::fs::read_to_string(file).unwrap();
        assert!(
            printed.contains(&checked_in),
            "{} differs from `karpenter crds`; regenerate with `cargo run --release -- crds --output-dir deploy/crds`",
            file.display()
        );
    }
    let total: usize = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().len())
        .sum();
    assert_eq!(
        total,
        printed.len(),
        "`karpenter crds` prints a CRD that deploy/crds does not hold"
    );
}

#[test]
fn validate_accepts_every_example() {
    let mut args = vec!["validate".to_owned()];
    for entry in std::fs::read_dir(repo().join("deploy/examples")).unwrap() {
        args.push(entry.unwrap().path().display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = karpenter(&args);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("7 Karpenter object(s) in 4 file(s): valid"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn validate_reports_each_problem_with_file_document_and_path() {
    let output = karpenter(&["validate", "tests/fixtures/five-mistakes.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("tests/fixtures/five-mistakes.yaml: document 1 (NodePool/broken): spec.")
        })
        .collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        text.contains("5 problem(s) in 1 Karpenter object(s)"),
        "{text}"
    );
}

#[test]
fn validate_names_the_migration_for_v1beta1() {
    let output = karpenter(&["validate", "tests/fixtures/v1beta1.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("karpenter convert"),
        "{}",
        stdout(&output)
    );
}

/// `validate` on what a successful `convert` wrote; its output.
#[track_caller]
fn validate_converted(output: &std::process::Output) -> std::process::Output {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let converted = dir.path().join("v1.yaml");
    std::fs::write(&converted, &output.stdout).unwrap();
    let check = karpenter(&["validate", converted.to_str().unwrap()]);
    assert!(check.status.success(), "{}", stdout(&check));
    check
}

#[test]
fn convert_output_validates() {
    let output = karpenter(&["convert", "tests/fixtures/v1beta1.yaml"]);
    validate_converted(&output);
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("WhenUnderutilized → WhenEmptyOrUnderutilized")
    );
}

/// The v0.2x getting-started manifests: `validate` names `convert`; `convert` says what
/// needs a person (the instance profile v1alpha1 took from a setting) with exit code 1, and
/// given it, writes v1 that validates.
#[test]
fn v1alpha5_manifests_convert_in_one_step() {
    let input = "tests/fixtures/convert/v0.26-getting-started.yaml";
    let refused = karpenter(&["validate", input]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stdout(&refused).contains("run `karpenter convert FILE`"),
        "{}",
        stdout(&refused)
    );
    let partial = karpenter(&["convert", input]);
    assert_eq!(partial.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&partial.stderr);
    assert!(
        stderr.contains("MANUAL: EC2NodeClass/default: spec.role or spec.instanceProfile")
            && stderr.contains("--default-instance-profile NAME"),
        "{stderr}"
    );
    let output = karpenter(&[
        "convert",
        "--default-instance-profile",
        "KarpenterNodeInstanceProfile-my-cluster",
        input,
    ]);
    let check = validate_converted(&output);
    assert!(
        stdout(&check).contains("2 Karpenter object(s) in 1 file(s): valid"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn missing_files_and_bad_flags_fail_clearly() {
    let output = karpenter(&["validate", "no/such/file.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read no/such/file.yaml"));
    let output = karpenter(&["migrate", "from-karpenter"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("add --dry-run"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = karpenter(&["--log-level", "not[valid", "crds"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("--log-level \"not[valid\": \"not[valid\" is not a level")
    );
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), `simulate` shows a live
/// status line and logs only warnings; log lines asked for go to `--log-file`.
#[test]
fn simulate_on_a_terminal_shows_a_status_line_and_only_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let command = format!(
        "{} simulate deploy/scenarios/emulator.yaml --journal {}",
        env!("CARGO_BIN_EXE_karpenter"),
        journal.display()
    );
    let output = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .output()
        .expect("util-linux script (a pseudo-terminal for the run)");
    let screen = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{screen}");
    // The status line's bar and summary (the report has neither), then the report.
    for part in ["=>", " nodes, $", "== emulator (00:01:30 simulated)"] {
        assert!(
            screen.contains(part),
            "{part:?} missing on screen:\n{screen}"
        );
    }
    assert!(!screen.contains(" INFO "), "{screen}");

    let log = dir.path().join("log.txt");
    let output = karpenter(&[
        "--log-level",
        "info",
        "--log-file",
        log.to_str().unwrap(),
        "simulate",
        "deploy/scenarios/emulator.yaml",
        "--journal",
        journal.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains(" INFO "), "{stderr}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains(" INFO ") && logged.contains("NodeClaim"),
        "{logged}"
    );
    let bad = karpenter(&["--log-file", "/no/such/dir/log.txt", "crds"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--log-file /no/such/dir/log.txt"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn simulate_then_post_mortems_on_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let output = karpenter(&[
        "--log-level",
        "error",
        "simulate",
        "--quiet",
        "--journal",
        journal,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = stdout(&output);
    assert!(
        report.contains("== built-in (01:00:00 simulated)"),
        "{report}"
    );
    assert!(
        report.contains("interruptions: 1 received, 1 handled"),
        "{report}"
    );

    let text = verified(journal);
    assert!(text.contains(" 0 different, 0 skipped"), "{text}");
    // The nominations kube-scheduler did not honour at once were checked on the journal
    // clock, recorded, and decided again alike.
    let checks: usize = text
        .lines()
        .last()
        .and_then(|l| {
            l.split("; ")
                .find_map(|p| p.strip_suffix(" nomination check(s) reproduced, 0 different"))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no nomination checks in:\n{text}"));
    assert!(checks >= 1, "{text}");

    let replay = karpenter(&["journal", "replay", journal]);
    let text = stdout(&replay);
    let nodes = report
        .lines()
        .find_map(|l| l.strip_prefix("nodes: "))
        .unwrap();
    let (count, cost) = nodes.split_once("  cost: ").unwrap();
    let cost: f64 = cost
        .trim_end_matches("/h")
        .trim_start_matches('$')
        .parse()
        .unwrap();
    let replayed: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("nodeclaims: {count} live, $")))
        .and_then(|l| l.trim_end_matches("/h").parse().ok())
        .unwrap_or_else(|| panic!("report {nodes:?} vs replay:\n{text}"));
    assert!(
        (replayed - cost).abs() < 0.006,
        "report {nodes:?} vs replay:\n{text}"
    );
    // The run ends with nodes disrupted: empty ones removed, drifted ones replaced.
    assert!(
        text.contains("disruption commands: 0 in flight") || text.contains("in flight; ended:"),
        "{text}"
    );

    let early = karpenter(&["journal", "replay", journal, "--until", "1m"]);
    assert!(
        stdout(&early).contains("state at seq"),
        "{}",
        stdout(&early)
    );
    let bad = karpenter(&["journal", "replay", journal, "--until", "soon"]);
    assert_eq!(bad.status.code(), Some(2));

    let name = text
        .lines()
        .find_map(|l| {
            l.split_whitespace()
                .next()
                .filter(|n| n.starts_with("general-purpose-"))
        })
        .unwrap();
    let explain = karpenter(&[
        "journal",
        "explain",
        &format!("nodeclaim/{name}"),
        "--journal",
        journal,
    ]);
    let why = stdout(&explain);
    // Planned by a scheduling round, or as a disruption command's replacement.
    assert!(
        why.contains("planned by round") || why.contains("planned by disruption command"),
        "missing where it was planned in:\n{why}"
    );
    for part in [
        "candidates (",
        "launch intent recorded",
        "cloud launched",
        "registered",
        "initialized",
    ] {
        assert!(why.contains(part), "missing {part:?} in:\n{why}");
    }
    let tail = karpenter(&["journal", "tail", journal, "-n", "3"]);
    assert_eq!(stdout(&tail).lines().count(), 3);

    reports_and_what_ifs(dir.path(), journal);
}

/// `journal report` draws the run; `journal whatif` under the recorded manifests decides
/// exactly what the run decided, and with spot disallowed costs more.
fn reports_and_what_ifs(dir: &Path, journal: &str) {
    let page = dir.join("report.html");
    let report = karpenter(&[
        "journal",
        "report",
        journal,
        "--output",
        page.to_str().unwrap(),
    ]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    for part in [
        "Cost",
        "from scratch",
        "lower bound",
        "Nodes by capacity type",
        "Pods",
        "Disruptions by reason",
        "Fleet at the end",
        "<svg",
    ] {
        assert!(html.contains(part), "the report lacks {part:?}");
    }
    assert!(!html.contains("<script") && !html.contains("https://"));

    let recorded: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(journal).join("scenario.yaml")).unwrap(),
    )
    .unwrap();
    let own = recorded["manifests"].as_str().unwrap().to_owned();
    let (same, no_spot) = (dir.join("same.yaml"), dir.join("no-spot.yaml"));
    std::fs::write(&same, &own).unwrap();
    std::fs::write(
        &no_spot,
        own.replace("values: [spot, on-demand]", "values: [on-demand]")
            .replace("values: [spot]", "values: [on-demand]"),
    )
    .unwrap();
    let replayed = dir.join("replayed");
    let whatif = karpenter(&[
        "journal",
        "whatif",
        journal,
        "--manifests",
        same.to_str().unwrap(),
        "--keep-journal",
        replayed.to_str().unwrap(),
    ]);
    assert!(
        whatif.status.success(),
        "{}",
        String::from_utf8_lossy(&whatif.stderr)
    );
    assert!(!String::from_utf8_lossy(&whatif.stderr).contains("dropped"));
    // Event for event the same, but for how long each round took to compute.
    let events = |journal: &str| -> Vec<String> {
        let tail = karpenter(&["journal", "tail", journal, "-n", "1000000"]);
        let duration = regex::Regex::new(r" \d+µs$").unwrap();
        stdout(&tail)
            .lines()
            .map(|l| duration.replace(l, "").into_owned())
            .collect()
    };
    let (original, again) = (events(journal), events(replayed.to_str().unwrap()));
    assert!(original.len() > 1000, "{}", original.len());
    assert_eq!(original.len(), again.len());
    for (a, b) in original.iter().zip(&again) {
        assert_eq!(
            a, b,
            "the replay under the recorded manifests decided otherwise"
        );
    }

    let whatif = karpenter(&[
        "journal",
        "whatif",
        journal,
        "--manifests",
        no_spot.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        whatif.status.success(),
        "{}",
        String::from_utf8_lossy(&whatif.stderr)
    );
    assert!(
        String::from_utf8_lossy(&whatif.stderr).contains("at 45m dropped: apply"),
        "{}",
        String::from_utf8_lossy(&whatif.stderr)
    );
    let figures: serde_json::Value = serde_json::from_slice(&whatif.stdout).unwrap();
    let mean = |run: &str| figures[run]["mean_cost_per_hour"].as_f64().unwrap();
    assert!(
        mean("whatif") > mean("recorded") * 1.5,
        "on-demand only should cost well above spot: {} against {}",
        mean("whatif"),
        mean("recorded")
    );
    assert_eq!(figures["whatif"]["pods_pending_at_end"], 0);
    against_cluster_autoscaler(dir, journal);
    let missing = karpenter(&[
        "journal",
        "whatif",
        dir.to_str().unwrap(),
        "--manifests",
        "x.yaml",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("has no scenario.yaml"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// `journal whatif --cluster-autoscaler`: the recorded workload under node groups derived
/// from its NodePools places every pod at a higher cost with more instances; the groups it
/// prints can be given back with `--node-groups`, and a bad file names the field.
fn against_cluster_autoscaler(dir: &Path, journal: &str) {
    let kept = dir.join("cas-journal");
    let run = karpenter(&[
        "journal",
        "whatif",
        journal,
        "--cluster-autoscaler",
        "--json",
        "--cas-journal",
        kept.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    for part in [
        "general-purpose-spot: ",
        "general-purpose-on-demand: ",
        "gpu-on-demand: ",
        "left out: apply",
        "left out: amiRelease",
    ] {
        assert!(stderr.contains(part), "missing {part:?} in:\n{stderr}");
    }
    let figures: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let cas = &figures["cluster_autoscaler"];
    assert_eq!(cas["pods_pending_at_end"], 0, "{cas}");
    assert!(cas["pods_bound"].as_u64().unwrap() > 500, "{cas}");
    let (ours, theirs) = (
        figures["recorded"]["mean_cost_per_hour"].as_f64().unwrap(),
        cas["mean_cost_per_hour"].as_f64().unwrap(),
    );
    assert!(
        theirs > ours,
        "fixed one-type groups should cost more: {theirs} against {ours}"
    );
    assert!(cas["disrupted"]["empty"].as_u64().unwrap() > 0, "{cas}");
    // Its journal reads like any other.
    let page = dir.join("cas.html");
    let report = karpenter(&[
        "journal",
        "report",
        kept.to_str().unwrap(),
        "--output",
        page.to_str().unwrap(),
    ]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );

    let groups = dir.join("groups.yaml");
    std::fs::write(&groups, figures["node_groups"].as_str().unwrap()).unwrap();
    let again = karpenter(&[
        "journal",
        "whatif",
        journal,
        "--cluster-autoscaler",
        "--node-groups",
        groups.to_str().unwrap(),
        "--expander",
        "least-waste",
    ]);
    let text = stdout(&again);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    for part in [
        "karpenter-rs",
        "cluster-autoscaler",
        "instances launched",
        "$/h ours",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
    std::fs::write(
        &groups,
        "nodeGroups:\n  - name: web\n    instanceType: m9.enormous\n",
    )
    .unwrap();
    let bad = karpenter(&[
        "journal",
        "whatif",
        journal,
        "--cluster-autoscaler",
        "--node-groups",
        groups.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    // Flags of the other kind of replay are refused, not ignored.
    for extra in [
        &["--manifests", "x.yaml", "--node-groups", "g.yaml"][..],
        &["--cluster-autoscaler", "--keep-journal", "d"][..],
    ] {
        let args: Vec<&str> = ["journal", "whatif", journal]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let refused = karpenter(&args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot be used with")
                || stderr.contains("required arguments were not provided"),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("nodeGroups[0].instanceType: \"m9.enormous\" is not in the region's catalog"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn the_admin_endpoint_refuses_to_serve_beyond_loopback_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j");
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "simulate",
            "--quiet",
            "--admin",
            "0.0.0.0:0",
            "--journal",
            journal.to_str().unwrap(),
        ])
        .env_remove("ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs a bearer token"));
}

#[test]
fn a_simulation_killed_mid_run_replays_verifies_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    // At 120× real time the built-in hour takes 30 s; kill it about 4 s (8 simulated minutes) in.
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "--log-level",
            "error",
            "simulate",
            "--quiet",
            "--pace",
            "120",
            "--journal",
            journal,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(4));
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();

    let replay = karpenter(&["journal", "replay", journal]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let text = stdout(&replay);
    assert!(text.contains("state at seq"), "{text}");
    assert!(text.contains("live, $"), "{text}");
    let text = verified(journal);
    assert!(text.contains("0 different"), "{text}");

    // Resuming adopts what was running and finishes the scenario: the exit code is 0 only
    // when no instance is left without a NodeClaim and no actor failed.
    let resumed = karpenter(&[
        "--log-level",
        "error",
        "simulate",
        "--quiet",
        "--resume",
        "--journal",
        journal,
    ]);
    assert!(
        resumed.status.success(),
        "{}\n{}",
        stdout(&resumed),
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        stdout(&resumed).contains(", 0 pending"),
        "{}",
        stdout(&resumed)
    );
    let text = verified(journal);
    assert!(text.contains("0 different"), "{text}");
    let tail = stdout(&karpenter(&["journal", "tail", journal, "--since", "1"]));
    for event_type in ["LaunchRequested", "NodeClaimLaunched"] {
        let mut per_claim: std::collections::BTreeMap<&str, usize> =
            std::collections::BTreeMap::new();
        for line in tail
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(event_type))
        {
            *per_claim
                .entry(line.split_whitespace().nth(2).unwrap())
                .or_default() += 1;
        }
        assert!(!per_claim.is_empty());
        assert!(
            per_claim.values().all(|n| *n == 1),
            "{event_type} twice for a NodeClaim: {per_claim:?}"
        );
    }
    let none = dir.path().join("none");
    let again = karpenter(&["simulate", "--resume", "--journal", none.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "resuming nothing is an error");

    // Killed after opening its journal but before recording anything: nothing ran, so
    // the resume runs the scenario from the beginning.
    let empty = dir.path().join("empty");
    drop(karpenter_journal::Journal::<karpenter_core::events::DomainEvent>::open(&empty).unwrap());
    let fresh = karpenter(&["simulate", "--resume", "--journal", empty.to_str().unwrap()]);
    assert!(
        fresh.status.success(),
        "{}",
        String::from_utf8_lossy(&fresh.stderr)
    );
    assert!(String::from_utf8_lossy(&fresh.stderr).contains("holds no event"));
    assert!(stdout(&fresh).contains(", 0 pending"), "{}", stdout(&fresh));
}

#[test]
fn aws_flags_are_checked_before_anything_runs() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["simulate", "--aws-endpoint", "http://127.0.0.1:1"],
            "need --cloud aws",
        ),
        (
            &[
                "simulate",
                "--cloud",
                "aws",
                "--aws-region",
                "us-west-2",
                "--aws-endpoint",
                "https://ec2.example.com",
            ],
            "only emulators on loopback",
        ),
        (
            &[
                "simulate",
                "--cloud",
                "aws",
                "--aws-region",
                "us-west-2",
                "--prepare-emulator",
            ],
            "--prepare-emulator needs --aws-endpoint",
        ),
        (
            &[
                "simulate",
                "--cloud",
                "aws",
                "--aws-region",
                "us-west-2",
                "--vm-memory-overhead-percent",
                "7.5",
            ],
            "--vm-memory-overhead-percent 7.5",
        ),
    ];
    for (args, message) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .env_remove("AWS_REGION")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--cloud", "aws"])
        .env_remove("AWS_REGION")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("set AWS_REGION or --aws-region"));
}

#[test]
fn controller_flags_that_cannot_work_are_refused_before_connecting() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["controller", "--journal-bucket", "Not_A_Bucket/karpenter"],
            "--journal-bucket (JOURNAL_BUCKET)",
        ),
        (
            &[
                "controller",
                "--journal-bucket",
                "journals",
                "--aws-endpoint",
                "https://s3.example.com",
            ],
            "--aws-endpoint",
        ),
        (
            &[
                "controller",
                "--metrics-port",
                "9000",
                "--health-probe-port",
                "9000",
                "--health-probe-bind-address",
                "0.0.0.0",
            ],
            "--health-probe-bind-address",
        ),
        (
            &["controller", "--metrics-bind-address", "localhost"],
            "--metrics-bind-address",
        ),
        (
            &[
                "controller",
                "--cloud",
                "aws",
                "--aws-region",
                "us-west-2",
                "--cluster-name",
                "prod",
                "--cluster-cidr",
                "10.0.0.0/40",
            ],
            "--cluster-cidr \"10.0.0.0/40\"",
        ),
        (
            &["controller", "--cloud", "aws", "--cluster-name", "prod"],
            "AWS_REGION",
        ),
        (
            &["controller", "--interruption-queue", "q"],
            "--interruption-queue",
        ),
    ];
    for (args, named) in cases {
        // No kubeconfig anywhere: reaching the cluster would fail with another message.
        let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .env_remove("AWS_REGION")
            .env_remove("CLUSTER_ENDPOINT")
            .env_remove("CLUSTER_CIDR")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("INTERRUPTION_QUEUE")
            .env_remove("JOURNAL_BUCKET")
            .env("KUBECONFIG", "/nonexistent")
            .env("NO_COLOR", "1")
            .output()
            .expect("run karpenter");
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

#[test]
fn a_pod_nobody_can_serve_is_retried_and_the_journal_says_why_it_waited() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("stuck.yaml");
    std::fs::write(
        &scenario,
        r#"
name: stuck
duration: 10m
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: r
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {k: v}}]
    securityGroupSelectorTerms: [{tags: {k: v}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: default}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["9"]}
timeline:
  - {at: 1m, job: {name: too-big, cpu: "64", memory: 1Gi, replicas: 1, runFor: 1m}}
"#,
    )
    .unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let run = karpenter(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--quiet",
        "--journal",
        journal,
    ]);
    assert!(
        stdout(&run).contains("pods: 0 bound, 1 pending"),
        "{}",
        stdout(&run)
    );
    // Planned again every 10 s for 9 minutes; rounds that repeat the first one's input are
    // re-run from it and reproduce.
    let text = verified(journal);
    assert!(text.contains(" 0 different, 0 skipped"), "{text}");
    assert!(text.contains("re-run from round 1's input"), "{text}");
    let reproduced: usize = text
        .lines()
        .last()
        .and_then(|l| l.split("; ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(reproduced >= 50, "{text}");
    let name = karpenter(&["journal", "replay", journal]);
    let pod = stdout(&name)
        .lines()
        .find_map(|l| l.trim().strip_prefix("pending "))
        .unwrap()
        .to_owned();
    let explain = karpenter(&[
        "journal",
        "explain",
        &format!("pod/{pod}"),
        "--journal",
        journal,
    ]);
    let why = stdout(&explain);
    assert!(explain.status.success(), "{why}");
    assert!(why.contains("pending and provisionable"), "{why}");
    assert!(why.contains(" rounds): unschedulable: "), "{why}");
    assert!(why.contains("insufficient cpu"), "{why}");
}

/// A scenario whose every node drifts early (a new image), replaced one at a time.
const DRIFTING: &str = r#"
name: drift-kill
duration: 20m
region: us-east-1
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: KarpenterNodeRole-sim
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
    securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sim}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: general-purpose}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["2"]}
    disruption:
      consolidateAfter: 1m
      budgets: [{nodes: "1"}]
deployments:
  - name: web
    cpu: "1200m"
    memory: 1Gi
    replicas: 4
    labels: {app: web}
    maxUnavailable: 1
timeline:
  - at: 3m
    amiRelease: {}
"#;

/// A free port on 127.0.0.1.
/// `GET path` on 127.0.0.1:`port`, the body if it answered 200.
fn get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

#[test]
fn a_simulation_killed_while_a_drift_replacement_is_in_flight_finishes_it_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("drift.yaml");
    std::fs::write(&scenario, DRIFTING).unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let port = karpenter_aws::testing::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "--log-level",
            "error",
            "simulate",
            scenario.to_str().unwrap(),
            "--quiet",
            "--pace",
            "30",
            "--admin",
            &format!("127.0.0.1:{port}"),
            "--journal",
            journal,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it (SIGKILL) while a drift command waits for its replacement.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = None;
    while std::time::Instant::now() < deadline {
        if let Some(body) = get(port, "/disruption")
            && let Ok(status) = serde_json::from_str::<serde_json::Value>(&body)
            && let Some(commands) = status["commands"].as_array()
            && let Some(command) = commands.iter().find(|c| {
                c["phase"] == "WaitingReadiness"
                    && c["replacements"].as_array().is_some_and(|r| !r.is_empty())
            })
        {
            seen = Some(command.clone());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let seen = seen.expect("a drift command with a replacement in flight");

    let resumed = karpenter(&[
        "--log-level",
        "error",
        "simulate",
        scenario.to_str().unwrap(),
        "--json",
        "--resume",
        "--journal",
        journal,
    ]);
    assert!(
        resumed.status.success(),
        "{}\n{}",
        stdout(&resumed),
        String::from_utf8_lossy(&resumed.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(report["pods_pending"], 0, "{report}");
    assert_eq!(report["leaked_instances"], 0, "{report}");
    assert_eq!(report["disruptions"]["stale_marks"], 0, "{report}");
    // Every node drifted and was replaced: none runs the old image at the end.
    let replay = karpenter(&["journal", "replay", journal, "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    let id = seen["id"].as_u64().unwrap().to_string();
    let command = &view["disruptions"][&id];
    assert!(
        command["phase"] == "Done" || command["phase"].get("Abandoned").is_some(),
        "the command in flight was finished or given up: {command}"
    );
    for (name, claim) in view["nodeclaims"].as_object().unwrap() {
        if claim["state"] != "Terminated" {
            assert_eq!(
                claim["instance"]["image_id"], "ami-simulated-2",
                "{name} still runs the old image"
            );
        }
    }
    let text = verified(journal);
    assert!(
        text.contains("disruption decision(s) reproduced, 0 different"),
        "{text}"
    );

    // Why the candidate went, and what the replacement was for.
    let candidate = seen["candidates"][0]["nodeclaim"].as_str().unwrap();
    let explain = stdout(&karpenter(&[
        "journal",
        "explain",
        &format!("nodeclaim/{candidate}"),
        "--journal",
        journal,
    ]));
    assert!(
        explain.contains(&format!("disrupted (drifted) by disruption command {id}"))
            && explain.contains("why: drifted (AMIDrift)"),
        "{explain}"
    );
    let replacement = seen["replacements"][0].as_str().unwrap();
    let explain = stdout(&karpenter(&[
        "journal",
        "explain",
        &format!("nodeclaim/{replacement}"),
        "--journal",
        journal,
    ]));
    assert!(
        explain.contains(&format!(
            "planned by disruption command {id} as a replacement"
        )) && explain.contains("launched as a replacement by disruption command"),
        "{explain}"
    );
}
