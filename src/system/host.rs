//! The machine a benchmark runs on, and this process's memory as Linux reports it in
//! `/proc/self/status` (in kB there, so whatever the page size); `None` elsewhere.

/// Cores and load average, printed before a benchmark's figures so runs can be compared.
pub fn summary() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into());
    format!("machine: {cores} cores, load average {load} (1, 5, 15 min)")
}

/// Resident set size now (`VmRSS`).
pub fn resident_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// The largest resident set size since the process started or [`reset_peak`] (`VmHWM`).
pub fn peak_resident_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// Starts the peak over from the current resident set size (Linux 4.0 and later); false
/// where that cannot be done, the peak then being the process's.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
