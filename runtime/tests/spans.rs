//! Spans that belong to tasks: a span a task enters is current only while
//! that task runs. Tasks on one worker interleave through every kind of
//! wait, and each event carries exactly its own task's spans, never those
//! of a task switched out meanwhile; nested and doubly entered spans come
//! back in order; `task::Builder::span` covers a whole task, its panic's
//! unwind included; a task stopped inside spans leaks none.
//!
//! One subscriber for the whole binary (a global default can be set once):
//! tracing-subscriber's `Registry`, whose span stack is per thread, with a
//! [`Recorder`] layer. Tests run in parallel, so each one looks only at the
//! events and spans it made: its events' messages and its spans' `tag`s
//! start with the test's own prefix.

mod common;

use common::{rt, wait_for};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{info, info_span, Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// ---------------------------------------------------------------- recorder

/// An event as the recorder saw it.
#[derive(Clone, Debug)]
struct Record {
    message: String,
    /// Its other fields, `name=value` each, space-separated.
    fields: String,
    /// The labels of its span scope, innermost first.
    scope: Vec<String>,
}

/// What the recorder keeps, for every test of the binary.
#[derive(Default)]
struct Books {
    events: Vec<Record>,
    /// Spans made and not yet closed, by label.
    open: BTreeMap<String, i64>,
    /// Enters less exits, by label (over all threads).
    entered: BTreeMap<String, i64>,
}

static BOOKS: Mutex<Books> = Mutex::new(Books {
    events: Vec::new(),
    open: BTreeMap::new(),
    entered: BTreeMap::new(),
});

fn books() -> MutexGuard<'static, Books> {
    BOOKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A span's label: its `tag` field if it has one, else its name. Kept in
/// the span's extensions.
struct Label(String);

/// Collects an event's or a span's fields.
#[derive(Default)]
struct Fields {
    message: String,
    tag: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "tag" => self.tag = Some(value.to_owned()),
            name => {
                let _ = write!(self.rest, "{name}={value} ");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

/// Records every event with the labels of its span scope, and counts the
/// spans made and closed, entered and exited.
struct Recorder;

impl<S> Layer<S> for Recorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        let label = f.tag.unwrap_or_else(|| attrs.metadata().name().to_owned());
        let span = ctx.span(id).expect("a new span is known");
        span.extensions_mut().insert(Label(label.clone()));
        *books().open.entry(label).or_default() += 1;
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let label = label_of(&ctx, &id);
        *books().open.entry(label).or_default() -= 1;
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let label = label_of(&ctx, id);
        *books().entered.entry(label).or_default() += 1;
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let label = label_of(&ctx, id);
        *books().entered.entry(label).or_default() -= 1;
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let scope = ctx
            .event_scope(event)
            .map(|s| s.map(|span| label(&span)).collect())
            .unwrap_or_default();
        books().events.push(Record {
            message: f.message,
            fields: f.rest,
            scope,
        });
    }
}

fn label<S: for<'a> LookupSpan<'a>>(span: &tracing_subscriber::registry::SpanRef<'_, S>) -> String {
    span.extensions()
        .get::<Label>()
        .map_or_else(|| span.name().to_owned(), |l| l.0.clone())
}

fn label_of<S: Subscriber + for<'a> LookupSpan<'a>>(ctx: &Context<'_, S>, id: &Id) -> String {
    label(&ctx.span(id).expect("a live span"))
}

/// Installs the binary's one subscriber (every test calls it first).
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(Recorder);
        tracing::subscriber::set_global_default(subscriber).expect("the one global subscriber");
    });
}

/// The events whose message starts with `prefix`, in the order recorded.
fn events(prefix: &str) -> Vec<Record> {
    books()
        .events
        .iter()
        .filter(|e| e.message.starts_with(prefix))
        .cloned()
        .collect()
}

/// The labels starting with `prefix` whose spans are not all closed, or
/// whose enters and exits do not match: `(label, open, entered)`.
fn unsettled(prefix: &str) -> Vec<(String, i64, i64)> {
    let b = books();
    let mut labels: Vec<&String> = b.open.keys().chain(b.entered.keys()).collect();
    labels.sort();
    labels.dedup();
    labels
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let open = b.open.get(l).copied().unwrap_or(0);
            let entered = b.entered.get(l).copied().unwrap_or(0);
            (l.clone(), open, entered)
        })
        .filter(|&(_, open, entered)| open != 0 || entered != 0)
        .collect()
}

/// Asserts that the events starting with `prefix` are `expected` (message,
/// scope innermost first), in any order between tasks but each exactly.
fn assert_scopes(prefix: &str, expected: &[(&str, &[&str])]) {
    let got = events(prefix);
    for e in &got {
        let want = expected
            .iter()
            .find(|(m, _)| *m == e.message)
            .unwrap_or_else(|| panic!("unexpected event {e:?}"));
        assert_eq!(e.scope, want.1, "the scope of {:?}", e.message);
    }
    assert_eq!(got.len(), expected.len(), "events {got:#?}");
}

// ------------------------------------------------------------------- tests

/// Three tasks in spans of their own and one in none take turns on one
/// worker through a sleep, a yield, an mpsc wait and a socket read: every
/// event carries exactly the spans of the task that logged it.
#[test]
fn waits_of_every_kind_keep_each_tasks_spans() {
    init();
    const ROUNDS: usize = 5;
    let rt = rt(1);
    let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // An echo server with no span, one connection per span task.
    let server = rt.spawn(move || {
        let conns: Vec<_> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        let echoes: Vec<_> = conns
            .into_iter()
            .map(|mut c| {
                spindle::spawn(move || {
                    let mut b = [0u8; 1];
                    while c.read(&mut b).unwrap() == 1 {
                        c.write_all(&b).unwrap();
                    }
                })
            })
            .collect();
        for e in echoes {
            e.join().unwrap();
        }
    });
    // A ring of channels: task i receives from i and sends to i + 1.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| spindle::sync::mpsc::channel()).unzip();
    let mut rxs: Vec<_> = rxs.into_iter().map(Some).collect();
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let rx = rxs[i].take().unwrap();
            let tx = txs[(i + 1) % 3].clone();
            rt.spawn(move || {
                let span = info_span!("task", tag = format!("interleave:{i}"));
                let _in = span.enter();
                let mut conn = spindle::net::TcpStream::connect(addr).unwrap();
                info!("interleave:{i}:connected");
                if i == 0 {
                    tx.send(()).unwrap();
                }
                for r in 0..ROUNDS {
                    spindle::sleep(Duration::from_millis(1)).unwrap();
                    info!("interleave:{i}:slept:{r}");
                    spindle::yield_now();
                    info!("interleave:{i}:yielded:{r}");
                    rx.recv().unwrap();
                    info!("interleave:{i}:received:{r}");
                    // The server runs only once this task waits: the read
                    // switches out.
                    conn.write_all(&[r as u8]).unwrap();
                    let mut b = [0u8; 1];
                    conn.read_exact(&mut b).unwrap();
                    assert_eq!(b[0], r as u8);
                    info!("interleave:{i}:read:{r}");
                    let _ = tx.send(());
                }
            })
        })
        .collect();
    // A task in no span, in between the others.
    let free = rt.spawn(|| {
        for r in 0..ROUNDS * 4 {
            info!("interleave:free:{r}");
            if r % 2 == 0 {
                spindle::yield_now();
            } else {
                spindle::sleep(Duration::from_micros(300)).unwrap();
            }
        }
    });
    for t in tasks {
        t.join().unwrap();
    }
    free.join().unwrap();
    server.join().unwrap();
    let got = events("interleave:");
    assert_eq!(got.len(), 3 * (1 + 4 * ROUNDS) + 4 * ROUNDS, "{got:#?}");
    for e in got {
        let who = e.message.split(':').nth(1).unwrap();
        if who == "free" {
            assert!(e.scope.is_empty(), "{e:?}");
        } else {
            assert_eq!(e.scope, [format!("interleave:{who}")], "{e:?}");
        }
    }
    assert_eq!(unsettled("interleave:"), []);
}

/// Runs `body` in two tasks of `rt`, named by the argument "a" and "b",
/// and waits for both.
fn run_as_a_and_b(rt: &spindle::Runtime, body: impl Fn(&'static str) + Clone + Send + 'static) {
    let tasks: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let body = body.clone();
            rt.spawn(move || body(who))
        })
        .collect();
    for t in tasks {
        t.join().unwrap();
    }
}

/// Two levels of spans in two tasks survive waits in order: after each
/// wait the inner span is current again, with the outer above it; once the
/// inner one is exited, the outer one is current.
#[test]
fn nested_spans_come_back_in_order() {
    init();
    let rt = rt(1);
    run_as_a_and_b(&rt, |who| {
        let outer = info_span!("outer", tag = format!("nest:{who}:outer"));
        let _o = outer.enter();
        info!("nest:{who}:outer:0");
        {
            let inner = info_span!("inner", tag = format!("nest:{who}:inner"));
            let _i = inner.enter();
            // One switch before each event (two would hide a
            // re-entry in the wrong order).
            for r in 0..3 {
                if r % 2 == 0 {
                    spindle::yield_now();
                } else {
                    spindle::sleep(Duration::from_micros(200)).unwrap();
                }
                info!("nest:{who}:inner:{r}");
            }
        }
        spindle::yield_now();
        info!("nest:{who}:outer:1");
    });
    info!("nest:outside");
    let mut expected = Vec::new();
    let (a, b) = (
        ["nest:a:inner", "nest:a:outer"],
        ["nest:b:inner", "nest:b:outer"],
    );
    for (who, both) in [("a", &a), ("b", &b)] {
        for m in ["outer:0", "outer:1"] {
            expected.push((format!("nest:{who}:{m}"), &both[1..]));
        }
        for r in 0..3 {
            expected.push((format!("nest:{who}:inner:{r}"), &both[..]));
        }
    }
    expected.push(("nest:outside".to_owned(), &[]));
    let expected: Vec<(&str, &[&str])> = expected.iter().map(|(m, s)| (m.as_str(), *s)).collect();
    assert_scopes("nest:", &expected);
    assert_eq!(unsettled("nest:"), []);
}

/// A span entered twice, with another in between, across waits: each exit
/// of a guard leaves what a thread would have current, and every enter
/// has its exit.
#[test]
fn a_span_entered_twice() {
    init();
    let rt = rt(1);
    run_as_a_and_b(&rt, |who| {
        let a = info_span!("twice", tag = format!("twice:{who}:a"));
        let g1 = a.enter();
        let g2 = a.enter();
        spindle::yield_now();
        info!("twice:{who}:aa");
        // Made inside `a`: its child.
        let b = info_span!("between", tag = format!("twice:{who}:b"));
        let g3 = b.enter();
        let g4 = a.enter();
        spindle::sleep(Duration::from_micros(200)).unwrap();
        // The registry skips a duplicate entry: `b` is current.
        info!("twice:{who}:aaba");
        drop(g4);
        spindle::yield_now();
        info!("twice:{who}:aab");
        drop(g3);
        spindle::sleep(Duration::from_micros(200)).unwrap();
        info!("twice:{who}:aa2");
        drop(g2);
        spindle::yield_now();
        info!("twice:{who}:a");
        drop(g1);
        spindle::yield_now();
        info!("twice:{who}:none");
    });
    let mut expected = Vec::new();
    let spans = [["twice:a:b", "twice:a:a"], ["twice:b:b", "twice:b:a"]];
    for (who, s) in ["a", "b"].into_iter().zip(&spans) {
        expected.push((format!("twice:{who}:aa"), &s[1..]));
        expected.push((format!("twice:{who}:aaba"), &s[..]));
        expected.push((format!("twice:{who}:aab"), &s[..]));
        expected.push((format!("twice:{who}:aa2"), &s[1..]));
        expected.push((format!("twice:{who}:a"), &s[1..]));
        expected.push((format!("twice:{who}:none"), &s[..0]));
    }
    let expected: Vec<(&str, &[&str])> = expected.iter().map(|(m, s)| (m.as_str(), *s)).collect();
    assert_scopes("twice:", &expected);
    assert_eq!(unsettled("twice:"), []);
}

/// Logs `message` as it drops.
struct LogOnDrop(&'static str);

impl Drop for LogOnDrop {
    fn drop(&mut self) {
        info!("{}", self.0);
    }
}

/// `Builder::span`: the task runs inside the span from its first run,
/// across waits, through a panic's unwind; spans it makes are children of
/// it; a child task does not inherit it unless given it; scoped and
/// `JoinSet` spawns take it too; and a refused spawn drops it.
#[test]
fn builder_span_covers_the_whole_task() {
    init();
    let rt = rt(1);
    let h = spindle::task::Builder::new()
        .span(info_span!("request", tag = "builder:req"))
        .spawn_on(&rt.handle(), || {
            info!("builder:start");
            spindle::sleep(Duration::from_micros(200)).unwrap();
            info!("builder:slept");
            let child = spindle::spawn(|| info!("builder:child"));
            let heir = spindle::task::Builder::new()
                .span(tracing::Span::current())
                .spawn(|| info!("builder:heir"))
                .unwrap();
            {
                let _inner = info_span!("inner", tag = "builder:inner").entered();
                spindle::yield_now();
                info!("builder:inner");
            }
            child.join().unwrap();
            heir.join().unwrap();
            spindle::scope(|s| {
                spindle::task::Builder::new()
                    .span(info_span!("scoped", tag = "builder:scoped"))
                    .spawn_scoped(s, || {
                        spindle::yield_now();
                        info!("builder:scoped");
                    })
                    .unwrap()
                    .join()
                    .unwrap();
            });
            let mut set = spindle::JoinSet::new();
            set.spawn_with(
                spindle::task::Builder::new().span(info_span!("set", tag = "builder:set")),
                || {
                    spindle::yield_now();
                    info!("builder:set");
                },
            )
            .unwrap();
            while set.join_next().unwrap().is_some() {}
            let _logs = LogOnDrop("builder:unwound");
            spindle::yield_now();
            panic!("builder:panic");
        })
        .unwrap();
    // Another task in its own span meanwhile, on the same worker.
    let other = spindle::task::Builder::new()
        .span(info_span!("request", tag = "builder:other"))
        .spawn_on(&rt.handle(), || {
            for _ in 0..4 {
                spindle::yield_now();
                info!("builder:other");
            }
        })
        .unwrap();
    assert!(h.join().is_err(), "the task panicked");
    other.join().unwrap();
    let handle = rt.handle();
    drop(rt);
    let refused = spindle::task::Builder::new()
        .span(info_span!("refused", tag = "builder:refused"))
        .spawn_on(&handle, || info!("builder:never"));
    assert!(
        refused.is_err(),
        "a spawn into a runtime that has shut down"
    );
    let req: &[&str] = &["builder:req"];
    let other: &[&str] = &["builder:other"];
    let mut expected: Vec<(&str, &[&str])> = vec![
        ("builder:start", req),
        ("builder:slept", req),
        ("builder:child", &[]),
        ("builder:heir", req),
        ("builder:inner", &["builder:inner", "builder:req"]),
        // Spans made inside the task are its children.
        ("builder:scoped", &["builder:scoped", "builder:req"]),
        ("builder:set", &["builder:set", "builder:req"]),
        ("builder:unwound", req),
    ];
    expected.extend([("builder:other", other); 4]);
    assert_scopes("builder:", &expected);
    assert_eq!(unsettled("builder:"), []);
}

/// The runtime's stop cancels tasks asleep inside spans: they are unwound
/// from their switch, their destructors log inside their spans, every span
/// they entered is exited once and closed, and the worker's own events at
/// the stop carry no task's span.
#[test]
fn stopped_tasks_leak_no_span() {
    init();
    let rt = rt(1);
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let req = info_span!("request", tag = format!("stopped:{who}:req"));
            spindle::task::Builder::new()
                .span(req)
                .spawn_on(&rt.handle(), move || {
                    let _logs = LogOnDrop(if who == "a" {
                        "stopped:a:unwound"
                    } else {
                        "stopped:b:unwound"
                    });
                    let inner = info_span!("inner", tag = format!("stopped:{who}:inner"));
                    let _i = inner.enter();
                    info!("stopped:{who}:asleep");
                    let _ = spindle::sleep(Duration::from_secs(3600));
                    unreachable!("the stop unwinds the sleep");
                })
                .unwrap()
        })
        .collect();
    wait_for("both tasks asleep", || events("stopped:").len() == 2);
    let ids: Vec<String> = handles.iter().map(|h| h.id().to_string()).collect();
    drop(rt);
    for h in handles {
        assert!(matches!(h.join(), Err(spindle::JoinError::Cancelled)));
    }
    info!("stopped:after");
    let scope = |who: &str| [format!("stopped:{who}:inner"), format!("stopped:{who}:req")];
    let (a, b) = (scope("a"), scope("b"));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let b: Vec<&str> = b.iter().map(String::as_str).collect();
    assert_scopes(
        "stopped:",
        &[
            ("stopped:a:asleep", &a),
            ("stopped:b:asleep", &b),
            // The destructors run as the unwind leaves the inner span.
            ("stopped:a:unwound", &a[1..]),
            ("stopped:b:unwound", &b[1..]),
            ("stopped:after", &[]),
        ],
    );
    assert_eq!(unsettled("stopped:"), []);
    // The runtime's own events: the stop's, logged by the worker outside
    // any task, carry no span; each task's unwind is logged inside its
    // `Builder::span`.
    let at_stop = events("cancelling the tasks blocked in a wait at stop");
    assert!(!at_stop.is_empty());
    for e in at_stop {
        assert!(e.scope.is_empty(), "{e:?}");
    }
    let unwound = events("task unwound by the runtime's stop");
    for (id, who) in ids.iter().zip(["a", "b"]) {
        let e = unwound
            .iter()
            .find(|e| e.fields.contains(&format!("task={id} ")))
            .unwrap_or_else(|| panic!("no unwind logged for {id}: {unwound:#?}"));
        assert_eq!(e.scope, [format!("stopped:{who}:req")], "{e:?}");
    }
}

/// Events of plain threads and of tasks in no span carry no task's span,
/// while tasks sit switched out inside theirs.
#[test]
fn events_outside_tasks_carry_no_task_span() {
    init();
    let rt = rt(1);
    let gate = std::sync::Arc::new(common::Gate::new());
    let sleepers: Vec<_> = (0..2)
        .map(|i| {
            let gate = gate.clone();
            rt.spawn(move || {
                let _s = info_span!("sleeper", tag = format!("outside:{i}")).entered();
                info!("outside:sleeper:{i}");
                gate.pass();
            })
        })
        .collect();
    wait_for("both sleepers waiting", || {
        events("outside:sleeper:").len() == 2
    });
    info!("outside:thread");
    rt.spawn(|| info!("outside:task")).join().unwrap();
    rt.block_on(|| info!("outside:block_on"));
    gate.open();
    for s in sleepers {
        s.join().unwrap();
    }
    assert_scopes(
        "outside:",
        &[
            ("outside:sleeper:0", &["outside:0"]),
            ("outside:sleeper:1", &["outside:1"]),
            ("outside:thread", &[]),
            ("outside:task", &[]),
            ("outside:block_on", &[]),
        ],
    );
    assert_eq!(unsettled("outside:"), []);
}

/// A subscriber for [`odd_subscribers_neither_hang_nor_lose_spans`]: its
/// current span is the last one made, whatever is entered or exited, if
/// `tracks`; else it says none is.
struct Odd {
    tracks: bool,
    made: std::sync::OnceLock<&'static tracing::Metadata<'static>>,
    enters: std::sync::atomic::AtomicUsize,
    exits: std::sync::atomic::AtomicUsize,
}

impl Subscriber for Odd {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let _ = self.made.set(attrs.metadata());
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {
        self.enters
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn exit(&self, _: &Id) {
        self.exits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn current_span(&self) -> tracing_core::span::Current {
        match self.made.get() {
            Some(meta) if self.tracks => tracing_core::span::Current::new(Id::from_u64(1), meta),
            // (`unknown`, the trait's default, is private to tracing-core;
            // to the runtime the two are alike: no id.)
            _ => tracing_core::span::Current::none(),
        }
    }
}

/// A subscriber whose current span never changes as it is exited does not
/// hang the worker: a switch exits a bounded number and enters them all
/// again. One that says no span is current sees no exit.
/// (Through `with_default` inside the task, on a runtime of its own: a
/// scoped dispatcher is its worker thread's.)
#[test]
fn odd_subscribers_neither_hang_nor_lose_spans() {
    use std::sync::atomic::Ordering::Relaxed;
    init();
    let rt = rt(1);
    for tracks in [true, false] {
        let (enters, exits) = rt
            .spawn(move || {
                let odd = std::sync::Arc::new(Odd {
                    tracks,
                    made: std::sync::OnceLock::new(),
                    enters: Default::default(),
                    exits: Default::default(),
                });
                let d = tracing::Dispatch::from(odd.clone());
                tracing::dispatcher::with_default(&d, || {
                    let _s = info_span!("odd").entered();
                    spindle::yield_now();
                    spindle::sleep(Duration::from_micros(100)).unwrap();
                });
                (odd.enters.load(Relaxed), odd.exits.load(Relaxed))
            })
            .join()
            .unwrap();
        if tracks {
            // Each of the two switches exits and re-enters the same
            // number: the bound, not endlessly.
            let per_switch = exits.checked_sub(1).unwrap() / 2;
            assert!((1..=1024).contains(&per_switch), "{exits} exits");
            assert_eq!(enters, exits, "each exit re-entered");
        } else {
            assert_eq!((enters, exits), (1, 1));
        }
    }
}
