//! Helpers for the timer benchmarks (`benches/sleep.rs`): latency samples
//! and their percentiles, and the process's memory as Linux reports it.
//!
//! Criterion reports a mean with a confidence interval; a timer is judged by
//! its tail. So the latency benchmarks keep every sample they take (in
//! [`Latencies`]), return their sum to criterion, and print the percentiles
//! next to criterion's report.
//!
//! A latency is a signed number of nanoseconds: a sleep that ends *before*
//! its deadline has a negative lateness, and that is a bug to count, not a
//! zero to hide.

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

/// Latency samples in nanoseconds (negative: early), in the order taken.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    samples: Vec<i64>,
}

impl Latencies {
    /// No samples.
    pub const fn new() -> Self {
        Latencies {
            samples: Vec::new(),
        }
    }

    /// Adds `samples`.
    pub fn extend(&mut self, samples: &[i64]) {
        self.samples.extend_from_slice(samples);
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Percentiles and counts of the samples so far (`None` if there are
    /// none). Percentiles are nearest-rank: `p50` is a sample that at least
    /// half the samples do not exceed.
    ///
    /// ```
    /// use spindle_benches::sleepers::Latencies;
    /// let mut l = Latencies::new();
    /// l.extend(&(1..=100).collect::<Vec<i64>>());
    /// l.extend(&[-5]);
    /// let s = l.summary().unwrap();
    /// assert_eq!((s.n, s.p50, s.p99, s.max, s.early), (101, 50, 99, 100, 1));
    /// ```
    pub fn summary(&self) -> Option<Summary> {
        if self.samples.is_empty() {
            return None;
        }
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let rank = |p: f64| {
            let r = (p * sorted.len() as f64).ceil() as usize;
            sorted[r.clamp(1, sorted.len()) - 1]
        };
        let sum: i128 = sorted.iter().map(|&s| i128::from(s)).sum();
        Some(Summary {
            n: sorted.len(),
            mean: (sum / sorted.len() as i128) as i64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
            early: sorted.iter().filter(|&&s| s < 0).count(),
        })
    }
}

/// The CPU time this process has used so far, user and system, over all
/// its threads: how much CPU a benchmark burned, next to its wall time.
pub fn process_cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the rusage it is pointed at, which is ours.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(r, 0, "getrusage(RUSAGE_SELF) cannot fail");
    // SAFETY: initialized above (and zeroed before, in any case).
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Duration::new(t.tv_sec as u64, 0) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// What [`Latencies::summary`] reports; all times in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: i64,
    /// Median (nearest rank).
    pub p50: i64,
    /// 99th percentile (nearest rank).
    pub p99: i64,
    /// The largest sample.
    pub max: i64,
    /// Samples below zero (a sleep that ended before its deadline).
    pub early: usize,
}

impl fmt::Display for Summary {
    /// `n=… p50=…µs p99=…µs mean=…µs max=…µs early=…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |ns: i64| ns as f64 / 1_000.0;
        write!(
            f,
            "n={} p50={:.1}µs p99={:.1}µs mean={:.1}µs max={:.1}µs early={}",
            self.n,
            us(self.p50),
            us(self.p99),
            us(self.mean),
            us(self.max),
            self.early
        )
    }
}

/// `later - earlier` in signed nanoseconds (negative if `later` is before
/// `earlier`).
///
/// ```
/// use spindle_benches::sleepers::signed_nanos;
/// use std::time::{Duration, Instant};
/// let t = Instant::now();
/// assert_eq!(signed_nanos(t + Duration::from_micros(3), t), 3_000);
/// assert_eq!(signed_nanos(t, t + Duration::from_micros(3)), -3_000);
/// ```
pub fn signed_nanos(later: Instant, earlier: Instant) -> i64 {
    match later.checked_duration_since(earlier) {
        Some(d) => nanos(d),
        None => -nanos(earlier - later),
    }
}

/// How late a sleep of `requested` that started at `start` and ended at
/// `end` was, in signed nanoseconds.
pub fn lateness(start: Instant, end: Instant, requested: Duration) -> i64 {
    signed_nanos(end, start) - nanos(requested)
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The sum of the non-negative samples, as criterion's measured time.
/// Negative samples (early wake-ups) count as zero here; they are counted
/// in [`Summary::early`] instead.
///
/// ```
/// use spindle_benches::sleepers::total;
/// use std::time::Duration;
/// assert_eq!(total(&[1_000, -400, 2_000]), Duration::from_nanos(3_000));
/// ```
pub fn total(samples: &[i64]) -> Duration {
    let ns: u64 = samples.iter().map(|&s| s.max(0).unsigned_abs()).sum();
    Duration::from_nanos(ns)
}

/// Reads a `kB` field (`VmRSS`, `VmHWM`, …) of `/proc/self/status`, in bytes.
pub fn proc_status_bytes(field: &str) -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_status_kb(&status, field)
        .map(|kb| kb * 1024)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no `{field}:` line in /proc/self/status"),
            )
        })
}

/// The resident memory of this process (`VmRSS`), in bytes.
pub fn rss_bytes() -> io::Result<u64> {
    proc_status_bytes("VmRSS")
}

/// The value of `field` in the text of a `/proc/<pid>/status` file, in kB.
///
/// ```
/// use spindle_benches::sleepers::parse_status_kb;
/// let s = "Name:\tsleep\nVmHWM:\t    2048 kB\nVmRSS:\t    1536 kB\n";
/// assert_eq!(parse_status_kb(s, "VmRSS"), Some(1536));
/// assert_eq!(parse_status_kb(s, "VmSwap"), None);
/// ```
pub fn parse_status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// `vm.max_map_count`: how many memory mappings a process may have. Every
/// may stack is two: the stack and its guard page; so is every spindle
/// stack on a kernel without guard regions.
pub fn max_map_count() -> io::Result<u64> {
    let s = std::fs::read_to_string("/proc/sys/vm/max_map_count")?;
    s.trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("max_map_count: {e}")))
}

/// Hands the allocator's free memory back to the kernel (glibc's
/// `malloc_trim`), so that a memory measurement that starts now is not
/// flattered by memory an earlier benchmark freed but the allocator kept
/// resident. A no-op elsewhere.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim takes a plain integer, touches only the
        // allocator's own state under its locks, and is safe to call from
        // any thread at any time.
        unsafe { malloc_trim(0) };
    }
}

/// Memory growth per task over a run: `(peak - before) / tasks` bytes
/// (0 if the process shrank).
///
/// ```
/// use spindle_benches::sleepers::per_task;
/// assert_eq!(per_task(1 << 20, (1 << 20) + 4096 * 10, 10), 4096.0);
/// assert_eq!(per_task(2048, 1024, 10), 0.0);
/// ```
pub fn per_task(before: u64, peak: u64, tasks: u64) -> f64 {
    peak.saturating_sub(before) as f64 / tasks.max(1) as f64
}
