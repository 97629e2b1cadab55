//! The layering rules, as a test that fails when a change breaks them:
//!
//! - which workspace crate may depend on which, and where an async runtime, actors, metrics and
//!   the AWS SDK may appear (read from `cargo metadata`, so transitive dependencies count);
//! - no module of a library imports, directly or through its siblings, a module that imports
//!   it back (read from the sources: `use` trees and `crate::`/`super::` paths; test modules
//!   are left out, since tests may reach anywhere).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The workspace crates and who they are.
const CORE: &str = "karpenter-core";
const ADMISSION: &str = "kube-admission";
const JOURNAL: &str = "karpenter-journal";
const ACTORS: &str = "karpenter-actors";
const AWS: &str = "karpenter-aws";
const EXPORT: &str = "karpenter-export";
const TEST_APISERVER: &str = "karpenter-test-apiserver";
const PRODUCT: &str = "karpenter-rs";

/// Crates that make a crate impure: an async runtime, the actor framework, metrics, the AWS
/// SDK and HTTP serving.
fn impure(name: &str) -> bool {
    matches!(
        name,
        "tokio" | "ractor" | "prometheus-client" | "axum" | "hyper" | "aws-config"
    ) || name.starts_with("aws-sdk-")
}

/// The workspace's resolved dependency graph: package name → (normal dependencies, all
/// dependencies including dev and build), each by package name.
struct Graph {
    workspace: BTreeSet<String>,
    normal: BTreeMap<String, BTreeSet<String>>,
    all: BTreeMap<String, BTreeSet<String>>,
    /// The root file of every library and binary, by target name (`crate` or `crate (bin)`).
    roots: BTreeMap<String, PathBuf>,
    /// The folder of every workspace crate (its manifest's), by package name.
    dirs: BTreeMap<String, PathBuf>,
}

/// The host's target triple: dependencies of other platforms are neither built nor
/// downloaded, so they are left out.
fn host() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

/// What `cargo <args>` prints, run offline on the workspace's lock file.
fn cargo(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .args(["--offline", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn graph() -> Graph {
    let host = host();
    let out = cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--filter-platform",
        &host,
    ]);
    let meta: Value = serde_json::from_slice(&out).expect("cargo metadata JSON");
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mut graph = Graph {
        workspace: members.iter().map(|id| names[id].to_owned()).collect(),
        normal: BTreeMap::new(),
        all: BTreeMap::new(),
        roots: BTreeMap::new(),
        dirs: BTreeMap::new(),
    };
    for p in meta["packages"].as_array().unwrap() {
        if !members.contains(p["id"].as_str().unwrap()) {
            continue;
        }
        let name = p["name"].as_str().unwrap().to_owned();
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
        graph
            .dirs
            .insert(name.clone(), manifest.parent().unwrap().to_path_buf());
        for target in p["targets"].as_array().unwrap() {
            let kinds = target["kind"].as_array().unwrap();
            let root = PathBuf::from(target["src_path"].as_str().unwrap());
            if kinds.iter().any(|k| k == "lib") {
                graph.roots.insert(name.clone(), root);
            } else if kinds.iter().any(|k| k == "bin") {
                let bin = target["name"].as_str().unwrap();
                graph.roots.insert(format!("{name} (bin {bin})"), root);
            }
        }
    }
    for node in meta["resolve"]["nodes"].as_array().expect("resolve") {
        let name = names[node["id"].as_str().unwrap()].to_owned();
        for dep in node["deps"].as_array().unwrap() {
            let dep_name = names[dep["pkg"].as_str().unwrap()].to_owned();
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                graph
                    .normal
                    .entry(name.clone())
                    .or_default()
                    .insert(dep_name.clone());
            }
            graph.all.entry(name.clone()).or_default().insert(dep_name);
        }
    }
    graph
}

impl Graph {
    /// The workspace crates `name` names in its manifest, of any kind.
    fn workspace_deps(&self, name: &str) -> BTreeSet<String> {
        self.all
            .get(name)
            .into_iter()
            .flatten()
            .filter(|d| self.workspace.contains(*d) && *d != name)
            .cloned()
            .collect()
    }

    fn direct(&self, name: &str) -> BTreeSet<String> {
        self.all.get(name).cloned().unwrap_or_default()
    }
}

#[test]
fn crates_depend_only_downwards() {
    let g = graph();
    for name in [
        CORE,
        ADMISSION,
        JOURNAL,
        ACTORS,
        AWS,
        EXPORT,
        TEST_APISERVER,
        PRODUCT,
    ] {
        assert!(g.workspace.contains(name), "workspace has no {name}");
    }
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        (ADMISSION, &[][..]),
        (JOURNAL, &[][..]),
        (TEST_APISERVER, &[ADMISSION][..]),
        (CORE, &[ADMISSION, JOURNAL][..]),
        (AWS, &[CORE][..]),
        (ACTORS, &[CORE, JOURNAL][..]),
        (EXPORT, &[CORE, JOURNAL][..]),
        (
            PRODUCT,
            &[
                CORE,
                ADMISSION,
                JOURNAL,
                ACTORS,
                AWS,
                EXPORT,
                TEST_APISERVER,
            ][..],
        ),
    ]);
    let mut problems = Vec::new();
    for name in &g.workspace {
        let Some(allowed) = allowed.get(name.as_str()) else {
            problems.push(format!(
                "{name} is a new workspace crate: say in tests/layers.rs what it may depend on"
            ));
            continue;
        };
        for dep in g.workspace_deps(name) {
            if !allowed.contains(&dep.as_str()) {
                problems.push(format!("{name} must not depend on {dep}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each product crate has a top-level folder of its own, so the folders show the crates: the
/// binary's crate is the root, every other crate a folder directly below it (the test API
/// server, test support, stays under `tests/`), and no crate's folder is inside another's.
#[test]
fn every_crate_has_its_own_top_level_folder() {
    let g = graph();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for (name, dir) in &g.dirs {
        let relative = dir.strip_prefix(root).unwrap_or(dir);
        let expected_depth = match name.as_str() {
            PRODUCT => 0,
            TEST_APISERVER => 2,
            _ => 1,
        };
        if relative.components().count() != expected_depth {
            problems.push(format!(
                "{name} lives in {}/: give it a top-level folder of its own",
                relative.display()
            ));
        }
        if name == TEST_APISERVER && !relative.starts_with("tests") {
            problems.push(format!("{name} is test support: keep it under tests/"));
        }
    }
    for (outer, outer_dir) in &g.dirs {
        for (inner, inner_dir) in &g.dirs {
            let nested = inner != outer && inner_dir.starts_with(outer_dir);
            if nested && outer != PRODUCT {
                problems.push(format!("{inner} is inside {outer}'s folder"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Per package (`name version`), the feature sets `cargo tree` resolves for `selection` (a
/// package built for the host and the target may have two).
fn resolved_features(selection: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let host = host();
    let mut args = vec![
        "tree", "--prefix", "none", "-f", "{p} |{f}", "--target", &host,
    ];
    args.extend(selection);
    let out = cargo(&args);
    let mut features: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out).lines() {
        let Some((package, set)) = line.split_once(" |") else {
            continue;
        };
        let mut words = package.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let set = set.trim_end_matches("(*)").trim();
        features
            .entry(format!("{name} {version}"))
            .or_default()
            .insert(set.to_owned());
    }
    features
}

/// The README's two commands share one build: `cargo run --release` (the product's normal
/// dependencies) and `cargo test --release --workspace` (every crate, dev-dependencies too)
/// resolve every package they both build with the same features. A feature only the test
/// build turns on compiles that package and everything above it twice (a `testing` feature
/// on the AWS crate, or a dev-dependency's feature on a crate under kube, rebuilt the whole
/// workspace); name it where the run build sees it too.
#[test]
fn the_test_build_reuses_the_run_build() {
    let run = resolved_features(&["-p", PRODUCT, "-e", "normal,build"]);
    let test = resolved_features(&["--workspace", "-e", "normal,build,dev"]);
    assert!(run.len() > 100, "cargo tree listed {} packages", run.len());
    let differing: Vec<String> = run
        .iter()
        .filter_map(|(package, features)| {
            let in_test = test.get(package)?;
            (in_test != features)
                .then(|| format!("{package}: run build {features:?}, test build {in_test:?}"))
        })
        .collect();
    assert!(
        differing.is_empty(),
        "built twice, with different features:\n{}",
        differing.join("\n")
    );
}

/// Everything `package` needs at run time, transitively, with the features it alone turns on
/// (`cargo tree -p` resolves as if only it were built; the workspace's resolved graph would
/// show the features other crates enable).
fn runtime_closure(package: &str) -> BTreeSet<String> {
    let host = host();
    let out = cargo(&[
        "tree", "-e", "normal", "--prefix", "none", "-f", "{p}", "--target", &host, "-p", package,
    ]);
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != package)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_core_has_no_runtime_actors_metrics_or_sdk() {
    for pure in [CORE, ADMISSION, EXPORT] {
        let closure = runtime_closure(pure);
        assert!(
            closure.contains("serde_json"),
            "cargo tree found too little for {pure}: {closure:?}"
        );
        let found: Vec<&String> = closure.iter().filter(|d| impure(d)).collect();
        assert!(
            found.is_empty(),
            "{pure} must stay pure, but depends (perhaps transitively) on {found:?}"
        );
    }
}

#[test]
fn the_aws_sdk_and_ractor_each_stay_in_their_crate() {
    let g = graph();
    let mut problems = Vec::new();
    for name in &g.workspace {
        for dep in g.direct(name) {
            let sdk = dep.starts_with("aws-sdk-") || dep == "aws-config";
            if sdk && name != AWS {
                problems.push(format!("{name} uses the AWS SDK ({dep}); only {AWS} may"));
            }
            if dep == "ractor" && name != ACTORS {
                problems.push(format!(
                    "{name} uses ractor; only {ACTORS} may (reach actors through its handles)"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One library's modules and the modules each one uses.
struct Modules {
    /// Module path (segments below the crate root) → its file.
    files: BTreeMap<Vec<String>, PathBuf>,
    /// (user, used) → the first line where `user` names `used`.
    uses: BTreeMap<(Vec<String>, Vec<String>), usize>,
}

/// Removes comments, string and character literals and `#[cfg(test)]` modules, keeping line
/// breaks so that line numbers still point into the file.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let newlines = |from: usize, to: usize, out: &mut String| {
        for c in &chars[from..to.min(chars.len())] {
            if *c == '\n' {
                out.push('\n');
            }
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            newlines(start, i, &mut out);
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"…", r#"…"#, …
            let start = i;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            j += 1;
            while j < chars.len() {
                if chars[j] == '"'
                    && chars[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == '#')
                        .count()
                        == hashes
                {
                    break;
                }
                j += 1;
            }
            i = j + 1 + hashes;
            newlines(start, i, &mut out);
            out.push_str("\"\"");
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            newlines(start, i, &mut out);
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{..}'.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Test modules: `#[cfg(test)]` then `mod name {` … its closing brace, or `mod name;`.
    let mut text = out;
    while let Some(at) = text.find("#[cfg(test)]") {
        let rest = &text[at..];
        let end = match (rest.find('{'), rest.find(';')) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                let mut depth = 0usize;
                let mut end = rest.len();
                for (i, c) in rest[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (_, Some(semi)) => semi + 1,
            _ => rest.len(),
        };
        let lines = rest[..end].matches('\n').count();
        text = format!("{}{}{}", &text[..at], "\n".repeat(lines), &rest[end..]);
    }
    text
}

/// The `mod name;` declarations of a file (inline modules are part of their file).
fn declared_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(rest) = line.strip_prefix("mod ")
            && let Some(name) = rest.strip_suffix(';')
        {
            found.push(name.trim().to_owned());
        }
    }
    found
}

/// The file of module `name` declared in `file`.
fn module_file(file: &Path, name: &str) -> PathBuf {
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let dir = if matches!(stem, "lib" | "main" | "mod") {
        file.parent().unwrap().to_owned()
    } else {
        file.parent().unwrap().join(stem)
    };
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// Every path a `use` tree or an expression spells from `crate::` or `super::`, as absolute
/// segments (perhaps continuing past the module into an item).
fn spelled_paths(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let at_crate = code[i..].starts_with("crate::");
        let at_super = code[i..].starts_with("super::");
        if boundary && (at_crate || at_super) {
            let line = code[..i].matches('\n').count() + 1;
            let mut base: Vec<String> = if at_crate {
                i += "crate::".len();
                Vec::new()
            } else {
                let mut base = module.to_vec();
                while code[i..].starts_with("super::") {
                    base.pop();
                    i += "super::".len();
                }
                base
            };
            // A path continues with identifiers and `::`; a `{` opens a group.
            let (paths, next) = use_tree(code, i);
            for p in paths {
                let mut full = base.clone();
                full.extend(p);
                found.push((full, line));
            }
            base.clear();
            i = next.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}

/// Parses a use tree starting at `at`: the paths it names and where it ends.
fn use_tree(code: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let mut prefix = Vec::new();
    loop {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == b'{' {
            at += 1;
            let mut paths = Vec::new();
            loop {
                while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
                    at += 1;
                }
                if at >= bytes.len() || bytes[at] == b'}' {
                    break;
                }
                let (inner, next) = use_tree(code, at);
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p);
                    paths.push(full);
                }
                if next == at {
                    at += 1;
                } else {
                    at = next;
                }
            }
            return (paths, at + 1);
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        if at == start {
            return (vec![prefix], at);
        }
        prefix.push(code[start..at].to_owned());
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            // `as name`, `;`, `,`, `(`, `<`… end the path.
            if code[at..].trim_start().starts_with("as ") {
                let rest = code[at..].trim_start();
                let skip = code.len() - rest.len() + 3;
                let mut end = skip;
                while end < bytes.len()
                    && (bytes[end].is_ascii_whitespace()
                        || bytes[end].is_ascii_alphanumeric()
                        || bytes[end] == b'_')
                {
                    end += 1;
                }
                return (vec![prefix], end);
            }
            return (vec![prefix], at);
        }
    }
}

fn read_modules(root: &Path) -> Modules {
    let mut modules = Modules {
        files: BTreeMap::new(),
        uses: BTreeMap::new(),
    };
    let mut stack = vec![(Vec::<String>::new(), root.to_owned())];
    let mut code_of = BTreeMap::new();
    while let Some((path, file)) = stack.pop() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let code = code_only(&text);
        for name in declared_modules(&code) {
            let mut child = path.clone();
            child.push(name.clone());
            stack.push((child, module_file(&file, &name)));
        }
        modules.files.insert(path.clone(), file);
        code_of.insert(path, code);
    }
    for (module, code) in &code_of {
        for (spelled, line) in spelled_paths(code, module) {
            // The longest prefix that is a module: what the path reaches into.
            let used = (0..=spelled.len())
                .rev()
                .map(|n| spelled[..n].to_vec())
                .find(|p| modules.files.contains_key(p))
                .unwrap_or_default();
            modules.uses.entry((module.clone(), used)).or_insert(line);
        }
    }
    modules
}

/// Sibling cycles: under each parent module, the children that reach each other. A child's
/// submodules count as the child; using an ancestor or a descendant is not a cycle.
fn cycles(modules: &Modules) -> Vec<String> {
    /// (child, sibling) → the first (module, line) that makes the edge.
    type Edges = BTreeMap<(String, String), (Vec<String>, usize)>;
    let mut siblings: BTreeMap<Vec<String>, Edges> = BTreeMap::new();
    for ((user, used), line) in &modules.uses {
        let common = user.iter().zip(used).take_while(|(a, b)| a == b).count();
        if common == user.len() || common == used.len() {
            continue;
        }
        siblings
            .entry(user[..common].to_vec())
            .or_default()
            .entry((user[common].clone(), used[common].clone()))
            .or_insert((user.clone(), *line));
    }
    let mut found = Vec::new();
    for (parent, edges) in siblings {
        let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (a, b) in edges.keys() {
            next.entry(a).or_default().push(b);
        }
        // A cycle through `a`: a path from one of `a`'s successors back to `a`.
        let mut reported = BTreeSet::new();
        for start in next.keys() {
            let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([*start]);
            let mut closed = false;
            while let Some(n) = queue.pop_front() {
                for &m in next.get(n).into_iter().flatten() {
                    if m == *start {
                        came_from.insert(m, n);
                        closed = true;
                        break;
                    }
                    if !came_from.contains_key(m) {
                        came_from.insert(m, n);
                        queue.push_back(m);
                    }
                }
                if closed {
                    break;
                }
            }
            if !closed {
                continue;
            }
            let mut back = Vec::new();
            let mut at = came_from[start];
            while at != *start {
                back.push(at);
                at = came_from[at];
            }
            let ring: Vec<&str> = std::iter::once(*start)
                .chain(back.into_iter().rev())
                .collect();
            let key: BTreeSet<&str> = ring.iter().copied().collect();
            if !reported.insert(key) {
                continue;
            }
            let parent_name = if parent.is_empty() {
                "crate".to_owned()
            } else {
                parent.join("::")
            };
            let steps: Vec<String> = ring
                .iter()
                .zip(ring.iter().cycle().skip(1))
                .map(|(a, b)| {
                    let (user, line) = &edges[&((*a).to_owned(), (*b).to_owned())];
                    format!("{a} → {b} ({}:{line})", modules.files[user].display())
                })
                .collect();
            found.push(format!("under {parent_name}: {}", steps.join(", ")));
        }
    }
    found
}

#[test]
fn no_crate_has_a_module_cycle() {
    let g = graph();
    let mut problems = Vec::new();
    for (name, root) in &g.roots {
        let modules = read_modules(root);
        assert!(
            modules.files.len() > 1 || name == TEST_APISERVER,
            "{name}: found no modules under {}",
            root.display()
        );
        for cycle in cycles(&modules) {
            problems.push(format!("{name}: {cycle}"));
        }
    }
    assert!(
        problems.is_empty(),
        "module cycles (break them by moving what both need below both):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_ignores_tests_and_ancestors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\nmod c;\n");
    write("a/mod.rs", "pub mod x;\nuse crate::{b::{self, B}, c};\n");
    write(
        "a/x.rs",
        "use super::super::c::C;\nuse crate::a::A; // parent: fine\n",
    );
    write(
        "b.rs",
        concat!(
            "// use crate::a; in a comment\n/* crate::a */\n",
            "const S: &str = \"crate::a \\\" crate::a\";\n",
            "const R: &str = r#\"crate::a \"quoted\" crate::a\"#;\n",
            "const Q: char = '\"'; fn l<'a>(x: &'a str) -> &'a str { x }\n",
            "#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
        ),
    );
    write("c.rs", "fn f() { crate::b::g(); }\n");
    let modules = read_modules(&dir.path().join("lib.rs"));
    assert_eq!(modules.files.len(), 5);
    assert!(cycles(&modules).is_empty(), "{:?}", cycles(&modules));
    // c → a closes a → c.
    write("c.rs", "fn f() { crate::b::g(); }\nuse crate::a::x as y;\n");
    let found = cycles(&read_modules(&dir.path().join("lib.rs")));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("under crate: a → c"), "{found:?}");
    // Submodules count as their parent: a::x → c, c → a.
    write("a/mod.rs", "pub mod x;\n");
    let found = cycles(&read_modules(&dir.path().join("lib.rs")));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("a → c") && found[0].contains("c → a"),
        "{found:?}"
    );
}
