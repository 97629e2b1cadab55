//! The documents stay true and stay what they are for: every path ARCHITECTURE.md names
//! exists and it stays a map (at most 1,500 words); the README's tables have one-line cells.
//! The module maps of the crates' roots name each module they declare, and only those.
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
