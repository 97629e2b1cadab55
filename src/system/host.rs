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

/// Another process's resident set size (bytes) and the CPU time it has used (user and
/// system, seconds), from `/proc/PID/status` and `/proc/PID/stat`.
pub fn process_sample(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = field_bytes(&status, "VmRSS:")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some((rss, cpu_seconds(&stat)?))
}

/// User and system time from a `/proc/PID/stat` line, seconds (its fields 14 and 15, in
/// `USER_HZ` ticks, which Linux fixes at 100 for `/proc`).
fn cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) is parenthesised and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // After the name, field 3 (state) is at index 0, so fields 14 and 15 are at 11 and 12.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

fn field_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_past_a_command_name_with_spaces() {
        let stat = "4242 (karpenter (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        let own = process_sample(std::process::id()).expect("this process's figures");
        assert!(own.0 > 0);
    }
}
