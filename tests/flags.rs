//! A refused flag touches nothing on disk: every command that takes a journal directory
//! checks its flags, settings and manifests before it replaces, moves or opens one.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", "/nonexistent")
        .env_remove("ADMIN_TOKEN")
        .env_remove("AWS_REGION")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("LOG_LEVEL")
        .env_remove("JOURNAL_DIR")
        .output()
        .expect("run karpenter")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(dir).unwrap().to_owned(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}

/// A short simulation's journal in `dir`.
fn recorded_journal(dir: &Path) -> PathBuf {
    let journal = dir.join("journal");
    let output = karpenter(&[
        "simulate",
        "deploy/scenarios/emulator.yaml",
        "--quiet",
        "--journal",
        journal.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    journal
}

/// Runs `args`, which must be refused with exit code 2 naming `named`, and checks that
/// `journal` is byte for byte what it was and that nothing said it was replaced.
fn refused_untouched(args: &[&str], named: &str, journal: &Path) {
    let before = contents(journal);
    let output = karpenter(args);
    let text = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{args:?} was not refused: {text}"
    );
    assert!(
        text.contains(named),
        "{args:?}: the error does not name {named:?}: {text}"
    );
    assert!(!text.contains("replacing"), "{args:?}: {text}");
    assert!(
        contents(journal) == before,
        "{args:?} changed the journal in {}",
        journal.display()
    );
}

#[test]
fn no_command_touches_a_journal_when_one_of_its_flags_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = recorded_journal(dir.path());
    let j = journal.to_str().unwrap();
    let missing_dir = dir.path().join("no-such-dir/report.html");
    let simulate_cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--admin", "0.0.0.0:0"], "needs a bearer token"),
        (vec!["--pace", "0"], "--pace"),
        (
            vec!["--cluster-autoscaler", "--json"],
            "--cluster-autoscaler",
        ),
        (
            vec!["--cluster-autoscaler", "--cas-journal", j],
            "--cas-journal",
        ),
        (
            vec![
                "--cluster-autoscaler",
                "--node-groups",
                "no-such-groups.yaml",
            ],
            "--node-groups",
        ),
        (vec!["--report", missing_dir.to_str().unwrap()], "--report"),
        (vec!["--cloud", "aws"], "AWS_REGION"),
        (
            vec!["--cloud", "aws", "--aws-region", "us-west-2", "--pace", "5"],
            "--pace",
        ),
        (vec!["--aws-endpoint", "http://127.0.0.1:1"], "--cloud aws"),
        (vec!["no-such-scenario.yaml"], "no-such-scenario.yaml"),
    ];
    for (extra, named) in simulate_cases {
        let mut args = vec!["simulate", "--quiet", "--journal", j];
        args.extend(extra);
        refused_untouched(&args, named, &journal);
    }
    refused_untouched(
        &["--log-level", "verbose", "simulate", "--journal", j],
        "--log-level",
        &journal,
    );
    // The controller opens its journal only once it leads; its flags are checked first.
    for (extra, named) in [
        (vec!["--admin", "0.0.0.0:0"], "needs a bearer token"),
        (vec!["--cloud", "aws"], "AWS_REGION"),
        (vec!["--kube-client-qps", "0"], "--kube-client-qps"),
        (vec!["--kube-client-burst", "0"], "--kube-client-burst"),
    ] {
        let mut args = vec!["controller", "--journal", j];
        args.extend(extra);
        refused_untouched(&args, named, &journal);
    }
    // `bench cluster` refuses before it contacts anything.
    for (extra, named) in [
        (vec!["--quiet-window", "30s"], "--quiet-window"),
        (vec!["--scale", "0"], "--scale"),
    ] {
        let mut args = vec!["bench", "cluster"];
        args.extend(extra);
        refused_untouched(&args, named, &journal);
    }

    // journal whatif: its kept journal may not be the one it replays, nor anything else.
    let recorded = std::fs::read_to_string(journal.join("scenario.yaml")).unwrap();
    let recorded: serde_yaml_ng::Value = serde_yaml_ng::from_str(&recorded).unwrap();
    let manifests = dir.path().join("same.yaml");
    std::fs::write(&manifests, recorded["manifests"].as_str().unwrap()).unwrap();
    let m = manifests.to_str().unwrap();
    let kept = dir.path().join("kept");
    refused_untouched(
        &[
            "journal",
            "whatif",
            j,
            "--manifests",
            m,
            "--keep-journal",
            j,
        ],
        "the journal replayed",
        &journal,
    );
    refused_untouched(
        &[
            "journal",
            "whatif",
            j,
            "--cluster-autoscaler",
            "--cas-journal",
            j,
        ],
        "the journal replayed",
        &journal,
    );
    refused_untouched(
        &[
            "journal",
            "whatif",
            j,
            "--manifests",
            "no-such.yaml",
            "--keep-journal",
            kept.to_str().unwrap(),
        ],
        "no-such.yaml",
        &journal,
    );
    assert!(
        !kept.exists(),
        "a refused whatif created {}",
        kept.display()
    );
}

/// A directory that holds anything but a journal is never removed, whichever command is
/// told to write a journal there.
#[test]
fn a_directory_that_is_not_a_journal_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("keep.txt"), "mine").unwrap();
    let n = notes.to_str().unwrap();
    for args in [
        vec!["simulate", "--quiet", "--journal", n],
        vec!["bench", "long-run", "--duration", "1h", "--journal", n],
    ] {
        refused_untouched(&args, "is not a journal", &notes);
    }
}

#[test]
fn crds_help_names_every_crd_it_prints() {
    let printed = karpenter(&["crds"]);
    assert!(printed.status.success(), "{}", stderr(&printed));
    let text = String::from_utf8(printed.stdout).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("    kind: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    let help = karpenter(&["crds", "--help"]);
    let help = String::from_utf8(help.stdout).unwrap();
    let named = help.lines().next().unwrap();
    for kind in &kinds {
        assert!(named.contains(kind.as_str()), "{kind}: {named}");
    }
    assert_eq!(named.matches(", ").count() + 1, kinds.len(), "{named}");
}
