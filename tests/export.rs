//! `journal export --format parquet` read by a real query engine: two simulated clusters
//! exported into one tree, the README's three DuckDB queries run over it, and their answers
//! checked against the figures each `simulate` run printed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

fn karpenter(args: &[&str], dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("run karpenter");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(output.status.success(), "karpenter {args:?}:\n{out}\n{err}");
    out
}

/// The README's SQL blocks under "Fleet queries", in order.
fn readme_queries() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("\n## Fleet queries\n")
        .nth(1)
        .expect("README has a Fleet queries section");
    let section = section.split("\n## ").next().unwrap();
    section
        .split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect()
}

/// Runs `sql` in DuckDB from `dir`; the rows as JSON arrays.
fn duckdb(dir: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    let script = r#"
import json, sys, duckdb
rows = duckdb.connect().execute(sys.stdin.read()).fetchall()
print(json.dumps([list(r) for r in rows], default=str))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "DuckDB (scripts/test.sh installs it) refused:\n{sql}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What one `simulate` printed: spend lines, savings lines, wait lines.
#[derive(Debug, Default)]
struct Printed {
    /// (day, dollars, hours, $/h)
    spend: Vec<(String, f64, f64, f64)>,
    /// (reason, commands, nodeclaims, savings $/h)
    savings: Vec<(String, u64, u64, f64)>,
    /// (wait seconds, pod, outcome, why)
    waits: Vec<(f64, String, String, String)>,
}

fn printed(text: &str) -> Printed {
    let mut out = Printed::default();
    let number = |s: &str| -> f64 { s.trim_start_matches('$').parse().unwrap() };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("spend ") {
            // spend DAY: $D over H h, $C/h
            let (day, rest) = rest.split_once(": ").unwrap();
            let (dollars, rest) = rest.split_once(" over ").unwrap();
            let (hours, rest) = rest.split_once(" h, ").unwrap();
            let cost = rest.trim_end_matches("/h");
            out.spend
                .push((day.into(), number(dollars), number(hours), number(cost)));
        } else if let Some(rest) = line.strip_prefix("savings ") {
            // savings REASON: N command(s), M nodeclaim(s), $S/h
            let (reason, rest) = rest.split_once(": ").unwrap();
            let parts: Vec<&str> = rest.split(", ").collect();
            let first = |p: &str| p.split(' ').next().unwrap().parse::<u64>().unwrap();
            out.savings.push((
                reason.into(),
                first(parts[0]),
                first(parts[1]),
                number(parts[2].trim_end_matches("/h")),
            ));
        } else if let Some(rest) = line.strip_prefix("wait ") {
            // wait Ws POD (OUTCOME): WHY
            let (seconds, rest) = rest.split_once("s ").unwrap();
            let (pod, rest) = rest.split_once(" (").unwrap();
            let (outcome, why) = rest.split_once("): ").unwrap();
            out.waits
                .push((number(seconds), pod.into(), outcome.into(), why.into()));
        }
    }
    out
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1.5e-4,
        "{what}: DuckDB says {a}, simulate printed {b}"
    );
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

fn s(v: &serde_json::Value) -> String {
    v.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| v.to_string())
}

#[test]
fn duckdb_answers_the_readme_questions_with_the_figures_simulate_printed() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let runs = [
        ("alpha", None),
        ("beta", Some(repo.join("deploy/scenarios/balanced.yaml"))),
    ];
    let mut figures = Vec::new();
    for (cluster, scenario) in &runs {
        let journal = work.path().join(format!("journal-{cluster}"));
        let journal = journal.to_str().unwrap();
        let mut args = vec!["simulate", "--quiet", "--journal", journal];
        if let Some(scenario) = scenario {
            args.push(scenario.to_str().unwrap());
        }
        let out = karpenter(&args, repo);
        let run = printed(&out);
        assert!(!run.spend.is_empty(), "simulate printed no spend:\n{out}");
        assert!(
            run.waits.len() == 10,
            "simulate printed {} waits:\n{out}",
            run.waits.len()
        );
        figures.push((cluster.to_string(), run));
        karpenter(
            &[
                "journal",
                "export",
                journal,
                "--cluster",
                cluster,
                "--output",
                "export",
            ],
            work.path(),
        );
    }
    assert!(
        figures.iter().any(|(_, run)| !run.savings.is_empty()),
        "neither run finished a disruption command: nothing to sum"
    );
    let queries = readme_queries();
    assert_eq!(queries.len(), 3, "{queries:?}");

    // $/h by day and cluster.
    let rows = duckdb(work.path(), &queries[0]);
    let expected: Vec<(String, String, f64, f64, f64)> = figures
        .iter()
        .flat_map(|(cluster, run)| {
            run.spend
                .iter()
                .map(move |(day, d, h, c)| (cluster.clone(), day.clone(), *d, *h, *c))
        })
        .collect();
    assert_eq!(rows.len(), expected.len(), "{rows:?}\n{expected:?}");
    for (row, (cluster, day, dollars, hours, cost)) in rows.iter().zip(&expected) {
        assert_eq!((s(&row[0]), s(&row[1])), (cluster.clone(), day.clone()));
        close(f(&row[2]), *dollars, "dollars");
        close(f(&row[3]), *hours, "hours");
        close(f(&row[4]), *cost, "$/h");
    }

    // The ten longest waits across both clusters: each run's ten, merged.
    let rows = duckdb(work.path(), &queries[1]);
    let mut merged: Vec<(f64, String, String, String, String)> = figures
        .iter()
        .flat_map(|(cluster, run)| {
            run.waits.iter().map(move |(w, pod, outcome, why)| {
                (
                    *w,
                    pod.clone(),
                    cluster.clone(),
                    outcome.clone(),
                    why.clone(),
                )
            })
        })
        .collect();
    merged.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| (&a.1, &a.2).cmp(&(&b.1, &b.2)))
    });
    merged.truncate(10);
    assert_eq!(rows.len(), 10, "{rows:?}");
    for (row, (wait, pod, cluster, outcome, why)) in rows.iter().zip(&merged) {
        assert_eq!(
            (s(&row[0]), s(&row[1]), s(&row[3]), s(&row[4])),
            (cluster.clone(), pod.clone(), outcome.clone(), why.clone())
        );
        close(f(&row[2]), *wait, "wait seconds");
    }

    // Savings by reason.
    let rows = duckdb(work.path(), &queries[2]);
    let expected: Vec<(String, String, u64, u64, f64)> = figures
        .iter()
        .flat_map(|(cluster, run)| {
            run.savings
                .iter()
                .map(move |(r, c, n, v)| (cluster.clone(), r.clone(), *c, *n, *v))
        })
        .collect();
    assert_eq!(rows.len(), expected.len(), "{rows:?}\n{expected:?}");
    for (row, (cluster, reason, commands, nodeclaims, savings)) in rows.iter().zip(&expected) {
        assert_eq!(
            (s(&row[0]), s(&row[1]), f(&row[2]) as u64, f(&row[3]) as u64),
            (cluster.clone(), reason.clone(), *commands, *nodeclaims)
        );
        close(f(&row[4]), *savings, "savings $/h");
    }
}
