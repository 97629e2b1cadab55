//! `crds`, `validate` and `convert`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use karpenter_core::api::convert::{ConvertOptions, convert_with};
use karpenter_core::api::crds;
use karpenter_core::api::manifest::ManifestChecker;

fn read_input(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

pub fn crds(output_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let all = crds::all().context("cannot build the CRDs")?;
    match output_dir {
        None => {
            let yaml = crds::to_yaml(&all).context("cannot render the CRDs as YAML")?;
            std::io::stdout().write_all(yaml.as_bytes())?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for crd in &all {
                let path = dir.join(crds::file_name(crd));
                let yaml = crds::to_yaml(std::slice::from_ref(crd))?;
                std::fs::write(&path, yaml)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn validate(files: &[std::path::PathBuf]) -> anyhow::Result<ExitCode> {
    let checker = ManifestChecker::new()?;
    let mut problems = 0usize;
    let mut checked = 0usize;
    let mut stdout = std::io::stdout().lock();
    for file in files {
        let text = read_input(file)?;
        for report in checker.check_str(&text) {
            if report.skipped {
                continue;
            }
            checked += 1;
            for problem in &report.problems {
                problems += 1;
                writeln!(
                    stdout,
                    "{}: document {} ({}): {}",
                    file.display(),
                    report.index,
                    report.label(),
                    problem
                )?;
            }
        }
    }
    if problems == 0 {
        writeln!(
            stdout,
            "{checked} Karpenter object(s) in {} file(s): valid",
            files.len()
        )?;
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(
            stdout,
            "{problems} problem(s) in {checked} Karpenter object(s)"
        )?;
        Ok(ExitCode::from(1))
    }
}

pub fn convert(file: &Path, options: &ConvertOptions) -> anyhow::Result<ExitCode> {
    let text = read_input(file)?;
    let conversion = convert_with(&text, options)
        .with_context(|| format!("cannot convert {}", file.display()))?;
    let yaml = conversion.yaml().context("cannot render YAML")?;
    let mut manual = 0;
    for change in &conversion.changes {
        let marker = if change.manual { "MANUAL" } else { "changed" };
        manual += usize::from(change.manual);
        eprintln!("{marker}: {}: {}", change.object, change.description);
    }
    let checker = ManifestChecker::new()?;
    let mut invalid = 0;
    for report in checker.check_str(&yaml) {
        for problem in &report.problems {
            invalid += 1;
            eprintln!(
                "invalid after conversion: document {} ({}): {problem}",
                report.index,
                report.label()
            );
        }
    }
    std::io::stdout().write_all(yaml.as_bytes())?;
    if manual + invalid > 0 {
        eprintln!(
            "{manual} change(s) need a person and {invalid} problem(s) remain; the output is not ready to apply"
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn install(values: Option<&Path>, sets: &[String]) -> anyhow::Result<ExitCode> {
    let (text, origin) = match values {
        Some(path) => (read_input(path)?, path.display().to_string()),
        None => (String::new(), "the default values".to_owned()),
    };
    let values = karpenter_rs::install::Values::from_yaml_with(&text, &origin, sets)?;
    let objects = karpenter_rs::install::manifests(&values)?;
    let yaml = karpenter_rs::install::to_yaml(&objects)?;
    std::io::stdout().write_all(yaml.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

pub fn write_chart_files(chart: &Path) -> anyhow::Result<ExitCode> {
    for (path, text) in karpenter_rs::install::chart_files()? {
        let path = chart.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
