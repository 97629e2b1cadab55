//! The documents stay true and stay what they are for: every path ARCHITECTURE.md names
//! exists and it stays a map (at most 1,500 words); the README's tables have one-line cells.
//! The module maps of the crates' roots name each module they declare, and only those.
//! docs/commands.md names every flag of `simulate`, docs/scenarios.md every key a scenario
//! takes, and its example scenario runs.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `backticked` spans of a Markdown text, outside code blocks.
fn code_spans(text: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push(span);
        }
    }
    spans
}

/// Whether a code span names a file or folder of the repository: it starts with one of the
/// repository's top-level entries and is a plain path.
fn names_a_path(span: &str, top_level: &[String]) -> bool {
    let plain = !span.is_empty()
        && !span.contains(char::is_whitespace)
        && !span.contains("::")
        && !span.contains(['*', '{', '<', '=']);
    let first = span.split('/').next().unwrap_or_default();
    plain && top_level.iter().any(|t| t == first) && (span.contains('/') || span.contains('.'))
}

#[test]
fn every_path_architecture_md_names_exists() {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let top_level: Vec<String> = std::fs::read_dir(repo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target")
        .collect();
    let named: Vec<&str> = code_spans(&text)
        .into_iter()
        .filter(|s| names_a_path(s, &top_level))
        .collect();
    assert!(named.len() >= 30, "too few paths found: {named:?}");
    let missing: Vec<&&str> = named
        .iter()
        .filter(|p| !repo().join(p.trim_end_matches('/')).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn architecture_md_stays_a_map() {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let words = text.split_whitespace().count();
    assert!(
        words <= 1_500,
        "ARCHITECTURE.md has {words} words: keep it a map of at most 1,500 and move the story \
         into the module docs of the code that has it"
    );
}

#[test]
fn readme_table_cells_are_one_line() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let long: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .flat_map(|l| l.split('|'))
        .map(str::trim)
        .filter(|cell| cell.chars().count() > 200)
        .map(|cell| cell.chars().take(60).collect())
        .collect();
    assert!(
        long.is_empty(),
        "README table cells over 200 characters (put the detail in --help or docs/): {long:?}"
    );
}

#[test]
fn the_path_finder_finds_paths_and_only_paths() {
    let top = ["core".to_owned(), "Cargo.toml".to_owned(), "src".to_owned()];
    for path in ["core/src/", "core/src/lib.rs", "Cargo.toml", "src/sim/"] {
        assert!(names_a_path(path, &top), "{path}");
    }
    for not in [
        "kubernetes.io/hostname",
        "/metrics",
        "karpenter_core::recovery",
        "core",
        "src <x>",
    ] {
        assert!(!names_a_path(not, &top), "{not}");
    }
    assert_eq!(
        code_spans("a `x` b `y/z`\n```\n`no`\n```\n`w`"),
        ["x", "y/z", "w"]
    );
}

/// The modules a map (the `//!` bullets of a module's doc) names: each `name`: or
/// [`name`]: entry (`improve/` is `improve`).
fn mapped_modules(source: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for line in source.lines().filter_map(|l| l.strip_prefix("//!")) {
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            let after = &rest[start + 1..];
            let Some(end) = after.find('`') else { break };
            let name = &after[..end];
            let tail = &after[end + 1..];
            if tail.starts_with(':') || tail.starts_with("]:") {
                named.insert(name.trim_end_matches('/').to_owned());
            }
            rest = tail;
        }
    }
    named
}

/// The modules a file declares (`mod x;`, `pub mod x;`), test-only ones aside.
fn declared_modules(source: &str) -> BTreeSet<String> {
    let mut declared = BTreeSet::new();
    let mut test_only = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let name = ["pub mod ", "pub(crate) mod ", "mod "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = name
            && !test_only
        {
            declared.insert(name.to_owned());
        }
        if !line.starts_with("#[") {
            test_only = false;
        }
    }
    declared
}

#[test]
fn module_maps_name_every_module_and_only_modules() {
    for file in [
        "core/src/lib.rs",
        "actors/src/lib.rs",
        "actors/src/actor/mod.rs",
        "core/src/scheduling/mod.rs",
    ] {
        let source = std::fs::read_to_string(repo().join(file)).unwrap();
        let (mapped, declared) = (mapped_modules(&source), declared_modules(&source));
        let unnamed: Vec<_> = declared.difference(&mapped).collect();
        let gone: Vec<_> = mapped.difference(&declared).collect();
        assert!(
            unnamed.is_empty() && gone.is_empty(),
            "{file}: its map misses {unnamed:?} and names {gone:?}, which it does not declare"
        );
    }
}

#[test]
fn the_map_reader_reads_entries_and_declarations() {
    let source = "//! - [`a`]: one; `b`: two, `not` this;\n//! - `c/`: three\n\
                  pub mod a;\nmod b;\n#[cfg(test)]\nmod tests;\npub mod c;\n";
    assert_eq!(
        mapped_modules(source),
        ["a", "b", "c"].map(String::from).into()
    );
    assert_eq!(
        declared_modules(source),
        ["a", "b", "c"].map(String::from).into()
    );
}

/// A scratch directory of this test process, removed first if a run left it.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("karpenter-docs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn karpenter(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .env_remove("FEATURE_GATES")
        .output()
        .unwrap()
}

/// The text of a Markdown page from the heading starting with `from` to the next heading
/// starting with `until`.
fn section<'a>(page: &'a str, from: &str, until: &str) -> &'a str {
    let start = page
        .find(from)
        .unwrap_or_else(|| panic!("no heading {from:?}"));
    let end = page[start..].find(until).map_or(page.len(), |i| start + i);
    &page[start..end]
}

/// The long flags a `--help` text lists.
fn help_flags(help: &str) -> BTreeSet<String> {
    let flag = regex::Regex::new(r"^\s+(?:-\w, )?(--[a-z0-9-]+)").unwrap();
    (help.lines())
        .filter_map(|line| flag.captures(line).map(|c| c[1].to_owned()))
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

#[test]
fn commands_md_names_every_simulate_flag() {
    let out = karpenter(&["simulate".as_ref(), "--help".as_ref()]);
    let flags = help_flags(&String::from_utf8(out.stdout).unwrap());
    assert!(flags.len() > 30, "read too few flags: {flags:?}");
    let page = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let documented = format!(
        "{}{}",
        section(&page, "## `karpenter simulate", "## Global flags"),
        section(&page, "## Global flags", "## Examples")
    );
    let missing: Vec<_> = (flags.iter())
        .filter(|f| !documented.contains(&format!("`{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/commands.md's simulate table lacks {missing:?}"
    );
}

/// The keys serde expected where `yaml` put an unknown one, from `simulate`'s error.
fn expected_keys(yaml: &str) -> Vec<String> {
    let dir = scratch("keys");
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, yaml).unwrap();
    let journal = dir.join("journal");
    let out = karpenter(&[
        "simulate".as_ref(),
        file.as_os_str(),
        "--journal".as_ref(),
        journal.as_os_str(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8(out.stderr).unwrap();
    let list = (stderr.split_once("expected one of "))
        .unwrap_or_else(|| panic!("no list of keys in {stderr:?}"))
        .1;
    let list = list.split(" at line").next().unwrap();
    let keys: Vec<String> = (list.split(", "))
        .map(|k| k.trim_matches('`').to_owned())
        .collect();
    assert!(keys.len() > 2, "read too few keys from {stderr:?}");
    keys
}

/// The timeline's actions: the variants of `Action` in the scenario reader, camelCased.
fn timeline_actions() -> Vec<String> {
    let source = std::fs::read_to_string(repo().join("src/sim/scenario.rs")).unwrap();
    let body = source.split("pub enum Action {").nth(1).unwrap();
    let body = &body[..body.find("\n}").unwrap()];
    let variant = regex::Regex::new(r"(?m)^    ([A-Z][A-Za-z]*)[ (]").unwrap();
    let actions: Vec<String> = (variant.captures_iter(body))
        .map(|c| {
            let name = &c[1];
            name[..1].to_lowercase() + &name[1..]
        })
        .collect();
    assert!(actions.len() > 5, "read too few actions: {actions:?}");
    actions
}

#[test]
fn scenarios_md_names_every_key_a_scenario_takes() {
    let head = "name: x\nduration: 1m\nmanifests: \"\"\n";
    let nested = [
        "unknownKey: 1\n",
        "deployments:\n  - {name: a, cpu: 1, memory: 1Gi, unknownKey: 1}\n",
        "deployments:\n  - {name: a, cpu: 1, memory: 1Gi, topologySpread: [{topologyKey: k, unknownKey: 1}]}\n",
        "shortages:\n  - {from: 0s, until: 1m, unknownKey: 1}\n",
        "reservations:\n  - {instanceType: a, zone: b, count: 1, unknownKey: 1}\n",
    ];
    let page = std::fs::read_to_string(repo().join("docs/scenarios.md")).unwrap();
    let mut missing = Vec::new();
    for rest in nested {
        for key in expected_keys(&format!("{head}{rest}")) {
            if !page.contains(&format!("`{key}`")) {
                missing.push(key);
            }
        }
    }
    for action in timeline_actions() {
        if !page.contains(&format!("| `{action}` |")) {
            missing.push(action);
        }
    }
    assert!(missing.is_empty(), "docs/scenarios.md lacks {missing:?}");
}

#[test]
fn the_example_in_scenarios_md_runs() {
    let page = std::fs::read_to_string(repo().join("docs/scenarios.md")).unwrap();
    let example = section(&page, "## An example", "\n## ");
    let yaml = (example.split("```yaml\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let dir = scratch("example");
    let file = dir.join("example.yaml");
    std::fs::write(&file, yaml).unwrap();
    let journal = dir.join("journal");
    let out = karpenter(&[
        "simulate".as_ref(),
        file.as_os_str(),
        "--journal".as_ref(),
        journal.as_os_str(),
        "--quiet".as_ref(),
        "--json".as_ref(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the example failed: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // What the example's timeline says happens, happened.
    assert_eq!(report["pods_pending"], 0, "{report}");
    assert_eq!(report["interruptions"]["received"], 1, "{report}");
    let drifted = report["disruptions"]["by_reason"]["drifted"].as_u64();
    assert!(
        drifted.is_some_and(|n| n > 0),
        "the AMI release drifted nothing: {report}"
    );
}
