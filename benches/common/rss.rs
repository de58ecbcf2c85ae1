//! A process's peak resident memory, for the benchmarks that report it.

/// The peak resident set (`VmHWM`) of process `pid` in MiB; `None` when it cannot be read.
pub fn peak_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}
