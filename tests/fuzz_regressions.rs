//! Every input a fuzzer ever crashed on (`fuzz/regressions/<target>/`) goes through the same
//! checks as the fuzz target did (`fuzz/checks.rs`), so a fixed crash stays fixed without a
//! fuzzer build.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, dead_code)]

use std::path::PathBuf;

#[path = "../fuzz/checks.rs"]
mod checks;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn manifest_crashes_stay_fixed() {
    let found = inputs("manifest");
    assert!(
        !found.is_empty(),
        "fuzz/regressions/manifest holds the crashes found so far"
    );
    for (path, bytes) in found {
        eprintln!("{}", path.display());
        checks::manifest(&bytes);
    }
}

#[test]
fn sqs_message_crashes_stay_fixed() {
    for (path, bytes) in inputs("sqs_message") {
        eprintln!("{}", path.display());
        checks::sqs_message(&bytes);
    }
}

#[test]
fn journal_frame_crashes_stay_fixed() {
    for (path, bytes) in inputs("journal_frame") {
        eprintln!("{}", path.display());
        checks::journal_frame(&bytes);
    }
}

#[test]
fn admin_query_crashes_stay_fixed() {
    for (path, bytes) in inputs("admin_query") {
        eprintln!("{}", path.display());
        checks::admin_query(&bytes);
    }
}

/// The first crash: `convert` indexed into `spec.template.spec` written as a string.
#[test]
fn convert_names_a_field_that_is_not_a_mapping() {
    let yaml = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec: nodeklhenUnderutilized\n";
    let error = karpenter_core::api::convert::convert(yaml).unwrap_err();
    assert_eq!(
        error.to_string(),
        "document 1 (NodePool/default): spec.template.spec must be a mapping, not a string; fix it and convert again"
    );
}
