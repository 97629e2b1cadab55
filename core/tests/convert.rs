//! `karpenter convert` on real-shaped manifests of every released API: each case in
//! `tests/fixtures/convert/NAME.yaml` converts to exactly `NAME.v1.yaml` with exactly the
//! changes in `NAME.changes`, and what it writes passes `karpenter validate` unless a change
//! needs a person. A first line `# convert: --default-instance-profile NAME` sets that
//! option. `KARPENTER_BLESS=1` rewrites the expected files from what the conversion does
//! now (then read the diff).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use karpenter_core::api::convert::{Conversion, ConvertOptions, convert_with};
use karpenter_core::api::manifest::ManifestChecker;

fn cases() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/convert");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml") && !p.to_string_lossy().ends_with(".v1.yaml")
        })
        .collect();
    cases.sort();
    cases
}

fn options(input: &str) -> ConvertOptions {
    let mut options = ConvertOptions::default();
    for line in input.lines().take_while(|l| l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix("# convert: --default-instance-profile ") {
            options.default_instance_profile = Some(rest.trim().to_owned());
        }
    }
    options
}

fn change_lines(conversion: &Conversion) -> String {
    conversion
        .changes
        .iter()
        .map(|c| {
            let marker = if c.manual { "MANUAL" } else { "changed" };
            format!("{marker}: {}: {}\n", c.object, c.description)
        })
        .collect()
}

fn sibling(case: &Path, suffix: &str) -> PathBuf {
    let stem = case.file_stem().unwrap().to_string_lossy().into_owned();
    case.with_file_name(format!("{stem}{suffix}"))
}

#[test]
fn every_era_converts_to_what_is_expected_and_validates() {
    let checker = ManifestChecker::new().unwrap();
    let bless = std::env::var_os("KARPENTER_BLESS").is_some();
    let cases = cases();
    assert!(cases.len() >= 4, "{cases:?}");
    for case in cases {
        let input = std::fs::read_to_string(&case).unwrap();
        let conversion = convert_with(&input, &options(&input))
            .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        let yaml = conversion.yaml().unwrap();
        let changes = change_lines(&conversion);
        let (yaml_file, changes_file) = (sibling(&case, ".v1.yaml"), sibling(&case, ".changes"));
        if bless {
            std::fs::write(&yaml_file, &yaml).unwrap();
            std::fs::write(&changes_file, &changes).unwrap();
        }
        assert_eq!(
            yaml,
            std::fs::read_to_string(&yaml_file).unwrap(),
            "{}",
            case.display()
        );
        assert_eq!(
            changes,
            std::fs::read_to_string(&changes_file).unwrap(),
            "{}",
            case.display()
        );
        let problems: Vec<String> = checker
            .check_str(&yaml)
            .into_iter()
            .flat_map(|r| {
                let label = r.label();
                r.problems.into_iter().map(move |p| format!("{label}: {p}"))
            })
            .collect();
        let manual = conversion.changes.iter().filter(|c| c.manual).count();
        if manual == 0 {
            assert!(problems.is_empty(), "{}: {problems:#?}", case.display());
        }
        // Converting the output again changes nothing: it is v1 already.
        let again = convert_with(&yaml, &ConvertOptions::default()).unwrap();
        assert_eq!(again.yaml().unwrap(), yaml, "{}", case.display());
        assert!(
            again.changes.is_empty(),
            "{}: {:#?}",
            case.display(),
            again.changes
        );
    }
}

/// v1 manifests are left as they are.
#[test]
fn v1_examples_are_left_as_they_are() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let input = std::fs::read_to_string(&path).unwrap();
        let conversion = convert_with(&input, &ConvertOptions::default()).unwrap();
        assert!(
            conversion.changes.is_empty(),
            "{}: {:#?}",
            path.display(),
            conversion.changes
        );
        let parsed: Vec<serde_json::Value> = karpenter_core::api::manifest::split_documents(&input)
            .into_iter()
            .map(Result::unwrap)
            .filter(|v| !v.is_null())
            .collect();
        assert_eq!(conversion.documents, parsed, "{}", path.display());
        seen += 1;
    }
    assert!(seen >= 2, "{seen}");
}
