//! `karpenter bench cluster` end to end, scaled down: the basic case of upstream's
//! performance suite at a tenth of its pods (50 + 50, then 35 + 35) against the test API
//! server with its kube-scheduler and Deployment stand-ins, the controller and `sim-nodes`
//! as processes of their own. Both phases must settle, and the scale-out must evict no pod.
#![allow(missing_docs, clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use karpenter_test_apiserver::{ApiServer, Controllers, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_basic_case_scaled_down_settles_without_disrupting_the_scale_out() {
    let server = ApiServer::start_with(Options {
        controllers: Controllers {
            scheduler: true,
            workloads: true,
        },
        ..Options::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let work = dir.path().join("work");
    let binary = env!("CARGO_BIN_EXE_karpenter");
    let run = tokio::task::spawn_blocking(move || {
        Command::new(binary)
            .args(["bench", "cluster", "--case", "basic", "--scale", "0.1"])
            .args(["--quiet-window", "60s", "--boot-delay", "1s"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--work-dir")
            .arg(&work)
            .output()
            .unwrap()
    });
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the bench ends within 10 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let logs = |name: &str| {
        std::fs::read_to_string(dir.path().join("work").join(name))
            .map(|l| l.lines().rev().take(40).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    };
    let context = format!(
        "{stdout}\n{}\n--- controller (last lines, newest first)\n{}\n--- sim-nodes\n{}",
        String::from_utf8_lossy(&output.stderr),
        logs("controller.log"),
        logs("sim-nodes.log")
    );
    println!("{stdout}");
    assert!(output.status.success(), "{context}");
    let row = |phase: &str| -> Vec<String> {
        stdout
            .lines()
            .find(|l| l.starts_with(phase) && !l.contains("bounds") && !l.contains("requests"))
            .unwrap_or_else(|| panic!("no {phase} row: {context}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let scale_out = row("scale-out");
    assert_eq!(scale_out[1], "100", "{context}");
    assert_eq!(scale_out[7], "0", "the scale-out evicted pods: {context}");
    let consolidation = row("consolidation");
    assert_eq!(consolidation[1], "70", "{context}");
    let nodes = |r: &[String]| r[3].parse::<usize>().unwrap();
    assert!(
        nodes(&consolidation) < nodes(&scale_out),
        "consolidation removed no node: {context}"
    );
    // The controller ran as a process of its own, and its memory was measured.
    let rss: f64 = scale_out[8].parse().unwrap();
    assert!(rss > 1.0, "{context}");
    assert!(
        stdout.contains("API requests (every client): "),
        "{context}"
    );
    server.stop().await;
}
