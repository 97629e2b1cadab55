//! Every command that prints ends quietly when what reads its output stops reading, as
//! `karpenter journal tail DIR | head -1` does: no panic, no "Broken pipe", no backtrace.
//! Each command's output pipe is closed before it writes (`| true`: its first write meets a
//! closed pipe, whatever its output's size), and the long outputs' after their first line
//! (`| head -1`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn karpenter() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1");
    command
}

/// Runs `karpenter ARGS | head -1` (`lines` 1) or `karpenter ARGS | true` (`lines` 0): reads
/// that many lines of its output, closes the pipe, and returns what it wrote on stderr once
/// it ended (within 120 s).
fn reader_goes_away(args: &[&str], lines: usize) -> String {
    let mut child = karpenter()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run karpenter");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "{args:?} printed nothing");
    }
    drop(stdout);
    // The reader is gone: the pipe is closed.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} did not end within 120 s of its reader going away");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_quiet(args: &[&str], lines: usize) {
    let stderr = reader_goes_away(args, lines);
    for noise in ["panicked", "Broken pipe", "backtrace"] {
        assert!(
            !stderr.contains(noise),
            "`karpenter {}` said {noise:?} when its reader went away:\n{stderr}",
            args.join(" ")
        );
    }
}

#[test]
fn every_printing_command_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let simulated = karpenter()
        .args([
            "simulate",
            "deploy/scenarios/emulator.yaml",
            "--quiet",
            "--journal",
            journal,
        ])
        .output()
        .unwrap();
    assert!(
        simulated.status.success(),
        "{}",
        String::from_utf8_lossy(&simulated.stderr)
    );
    let (again, json) = (format!("{journal}-again"), format!("{journal}-json"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["crds"],
        vec![
            "install",
            "--set",
            "image.repository=registry.example/karpenter-rs",
            "--set",
            "settings.clusterName=prod",
        ],
        vec!["validate", "deploy/examples/general-purpose.yaml"],
        vec!["convert", "tests/fixtures/v1beta1.yaml"],
        vec!["journal", "tail", journal, "-n", "100000"],
        vec!["journal", "replay", journal],
        vec!["journal", "replay", journal, "--json"],
        vec!["journal", "verify", journal],
        vec!["journal", "cost", journal],
        vec!["journal", "stats", journal],
        vec![
            "journal",
            "explain",
            "pod/default/web-000001",
            "--journal",
            journal,
        ],
        vec![
            "simulate",
            "deploy/scenarios/emulator.yaml",
            "--journal",
            &again,
        ],
        vec![
            "simulate",
            "deploy/scenarios/emulator.yaml",
            "--json",
            "--journal",
            &json,
        ],
        vec!["bench", "scheduling", "--sizes", "1,50", "--repeats", "1"],
        vec!["--help"],
    ];
    for args in &commands {
        assert_quiet(args, 0);
    }
    for args in [&commands[0], &commands[4]] {
        assert_quiet(args, 1);
    }
}
