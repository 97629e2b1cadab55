//! The documents stay true and stay what they are for: every path ARCHITECTURE.md names
//! exists and it stays a map (at most 1,500 words); the README's tables have one-line cells.
#![allow(clippy::unwrap_used)]

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
