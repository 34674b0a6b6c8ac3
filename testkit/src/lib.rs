//! Helpers shared by the tests of spindle's crates; not published.
#![warn(missing_docs)]

/// A `tracing` subscriber that hands each event's level and rendered fields
/// (`name=value ...`, the message as `message=...`) to its closure. Tests
/// install it process-wide, to see events of threads that are not theirs
/// (the timer thread, a runtime's workers).
#[derive(Debug)]
pub struct OnEvent<F>(pub F);

/// An event's fields, rendered.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<F: Fn(tracing::Level, &str) + Send + Sync + 'static> tracing::Subscriber for OnEvent<F> {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        (self.0)(*event.metadata().level(), &fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The events at `level` seen so far in this process, as their rendered
/// fields. The first call installs the process-wide subscriber that records
/// them; a test binary records one level only.
///
/// # Panics
/// If another subscriber is installed, or a later call names another level.
pub fn recorded(level: tracing::Level) -> &'static std::sync::Mutex<Vec<String>> {
    use std::sync::{Mutex, OnceLock};
    static RECORDED: OnceLock<(tracing::Level, &'static Mutex<Vec<String>>)> = OnceLock::new();
    let (recording, events) = *RECORDED.get_or_init(|| {
        let events: &'static Mutex<Vec<String>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let recorder = OnEvent(move |l: tracing::Level, fields: &str| {
            if l == level {
                events.lock().unwrap().push(fields.to_owned());
            }
        });
        tracing::subscriber::set_global_default(recorder).expect("install the subscriber");
        (level, events)
    });
    assert_eq!(recording, level, "this binary records one level only");
    events
}

/// Waits until an event recorded at `level` satisfies `seen`, for at most
/// `limit`; returns whether one did.
pub fn await_recorded(
    level: tracing::Level,
    limit: std::time::Duration,
    mut seen: impl FnMut(&str) -> bool,
) -> bool {
    let start = std::time::Instant::now();
    loop {
        if recorded(level).lock().unwrap().iter().any(|e| seen(e)) {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How long [`wait_for`] waits before it calls the wait a hang.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `cond` until it holds, yielding at first and then napping 1 ms
/// between looks; panics, naming `what`, after [`HANG`]: a bug that loses
/// a wake-up fails its test, not CI's time limit.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    let mut looks = 0u32;
    while !cond() {
        assert!(start.elapsed() < HANG, "timed out waiting for {what}");
        looks += 1;
        if looks < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// A small seeded generator (xorshift64, seeded through splitmix64 so that
/// neighbouring streams of one seed differ from their first number): test
/// data, pauses and choices, the same for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `stream` (an actor, a connection…) under `seed`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // xorshift must not start at 0.
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True once in `n` calls, on average.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A duration of `lo..=hi` µs.
    pub fn micros(&mut self, lo: u64, hi: u64) -> std::time::Duration {
        std::time::Duration::from_micros(self.range(lo, hi))
    }

    /// A generator of its own for a task or thread this one starts.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64(), 0x5eed)
    }
}

/// `len` bytes drawn from `seed`, different from seed to seed and from
/// place to place, so that a lost, repeated or reordered chunk shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed, 0xda7a);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The earliest `Instant` the platform can represent: from now, steps
/// back that halve each time one does not fit (the extreme `first` of a
/// periodic timer, in the timer's tests).
pub fn earliest_instant() -> std::time::Instant {
    let mut t = std::time::Instant::now();
    let mut step = std::time::Duration::MAX;
    while !step.is_zero() {
        match t.checked_sub(step) {
            Some(earlier) => t = earlier,
            None => step /= 2,
        }
    }
    t
}

/// The cfg that keeps a crate of spindle off other targets, as its
/// `lib.rs` writes it.
pub const NOT_LINUX: &str = r#"#[cfg(not(target_os = "linux"))]"#;

/// Checks that the crate at `manifest_dir` (its `CARGO_MANIFEST_DIR`)
/// refuses every target but Linux with a clear message, and shows that
/// message; returns it.
///
/// No other target is installed where the tests run, so this cannot build
/// the crate for one. Instead it reads the crate's `src/lib.rs`, finds the
/// item under [`NOT_LINUX`], and checks that it is a `compile_error!`
/// whose message starts with "spindle runs on Linux only:". Then it has
/// `rustc` compile that item twice, as a crate of its own: as written,
/// which must compile on this Linux host, and with its cfg turned around
/// (`target_os = "linux"` in place of its negation), which must fail with
/// that message, as the crate itself fails on any other OS.
///
/// # Panics
/// If any of that does not hold, or `rustc` cannot be run.
pub fn assert_linux_only(manifest_dir: &str) -> String {
    let lib = std::path::Path::new(manifest_dir).join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).expect("read the crate's lib.rs");
    let at = source
        .find(NOT_LINUX)
        .unwrap_or_else(|| panic!("{} has no `{NOT_LINUX}`", lib.display()));
    // The item under the cfg: up to the end of its statement.
    let rest = &source[at + NOT_LINUX.len()..];
    let item = &rest[..rest.find(");").expect("the item ends with `);`") + 2];
    let item = item.trim();
    assert!(
        item.starts_with("compile_error!("),
        "the item under `{NOT_LINUX}` is not a compile_error!: {item}"
    );
    let message = item
        .split('"')
        .nth(1)
        .expect("compile_error!'s message is a string literal")
        .to_owned();
    assert!(
        message.starts_with("spindle runs on Linux only:"),
        "unclear message: {message}"
    );

    let guarded = format!("{NOT_LINUX}\n{item}\n");
    let (ok, out) = rustc_lib(&guarded);
    assert!(ok, "the guard fails to compile on Linux:\n{out}");
    let turned = guarded.replace(r#"not(target_os = "linux")"#, r#"target_os = "linux""#);
    let (ok, out) = rustc_lib(&turned);
    assert!(!ok, "the turned-around guard compiled:\n{turned}");
    assert!(
        out.contains(&format!("error: {message}")),
        "rustc did not show the message; it said:\n{out}"
    );
    message
}

/// Compiles `code` as a library crate of its own (metadata only); returns
/// whether it compiled, and what `rustc` said.
fn rustc_lib(code: &str) -> (bool, String) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("spindle-linux-only-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("make a temporary directory");
    let file = dir.join("guard.rs");
    std::fs::write(&file, code).expect("write the guard's crate");
    // rustup's proxy picks the toolchain cargo runs the tests with.
    let out = std::process::Command::new("rustc")
        .args([
            "--crate-type",
            "lib",
            "--crate-name",
            "guard",
            "--emit",
            "metadata",
        ])
        .arg("--out-dir")
        .arg(&dir)
        .arg(&file)
        .output()
        .expect("run rustc");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
