//! CPU time and resident memory of a process, from `/proc` (Linux only).

use std::time::Duration;

use anyhow::Context;

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`): 100 on every Linux
/// architecture we build for (it is fixed by the kernel ABI, not `CONFIG_HZ`).
const TICKS_PER_S: u64 = 100;

/// User + system CPU time of `pid` (`"self"` for this process) so far, at 10 ms
/// resolution.
pub fn cpu_time(pid: &str) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) is in parentheses and may hold spaces: fields count
    // from after the last ')'. utime and stime are fields 14 and 15.
    let rest = text.rsplit_once(')').map(|(_, r)| r).context("no ')' in stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields.get(i - 3).context("short stat")?.parse().context("stat field")
    };
    let ticks = tick(14)? + tick(15)?;
    Ok(Duration::from_millis(ticks * 1000 / TICKS_PER_S))
}

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: &str) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
    let kb: u64 =
        line.split_whitespace().nth(1).context("VmRSS value")?.parse().context("VmRSS value")?;
    Ok(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_and_rss() {
        let start = cpu_time("self").unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_time("self").unwrap() >= start);
        assert!(rss_bytes("self").unwrap() > 1 << 20);
    }
}
