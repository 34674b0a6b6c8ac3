//! The benchmark report: a run's figures as SVG plots for
//! `docs/benchmarks.md`. `benches/report.sh` runs the benchmarks and then
//! this tool; it also redraws the plots from a saved run.
//!
//! ```text
//! report criterion --csv FILE --run N --groups G,G… [--log FILE] [--dir target/criterion]
//! report plot --csv FILE --machine FILE --out DIR
//! ```
//!
//! Every figure of a run is one line of a CSV file,
//! `source,case,system,metric,value,run`: `benches/echo.sh`,
//! `cold_start.sh` and `sleep_cpu.sh` append theirs with `--csv FILE`, the
//! Go peer of the runtime costs (`peers/runtime.go`) prints its line in the
//! same shape, and `report criterion` appends criterion's: the mean time per
//! operation of each benchmark of the named groups
//! (`target/criterion/*/*/new/estimates.json`; source `criterion`, metric
//! `ns_per_op`), and with `--log` the percentiles a latency benchmark prints
//! to stderr (`[group/peer] n=… p50=…µs p99=…µs … cpu=… cores`; source
//! `criterion_log`, metrics `p50_us`, `p99_us`, `cores`).
//!
//! `report plot` draws, from such a file, each figure's median over its runs
//! as a bar, with a whisker to the worst run (the highest time, the lowest
//! rate), and writes one SVG per plot into `--out`; the machine the run came
//! from (`--machine`, written by `report.sh`: a line for the machine, then
//! `PART: commit …, load average …` for each part of the run) is printed
//! under every plot, with the lines of the parts the plot draws. It also prints, as Markdown, the table behind each plot
//! with spindle's ratio to each peer (from the medians), for the text around
//! the plots. A plot whose figures are missing from the file is skipped
//! with a message.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const USAGE: &str = "usage:
  report criterion --csv FILE --run N --groups G,G... [--log FILE] [--dir target/criterion]
  report plot --csv FILE --machine FILE --out DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("criterion") => Flags::parse(&args[1..]).and_then(|f| collect_criterion(&f)),
        Some("plot") => Flags::parse(&args[1..]).and_then(|f| plot_all(&f)),
        _ => Err(USAGE.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line's `--name value` pairs.
#[derive(Debug)]
struct Flags(Vec<(String, String)>);

impl Flags {
    fn parse(args: &[String]) -> Result<Flags> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument {flag}\n{USAGE}"))?;
            let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            pairs.push((name.to_string(), value.clone()));
        }
        Ok(Flags(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn need(&self, name: &str) -> Result<&str> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required\n{USAGE}").into())
    }
}

// ------------------------------------------------------------------ collect

/// `report criterion`: appends the named groups' criterion estimates, and
/// the percentiles of the `--log`, to the CSV file.
fn collect_criterion(flags: &Flags) -> Result<()> {
    let csv = flags.need("csv")?;
    let run: u32 = flags.need("run")?.parse()?;
    let groups: BTreeSet<&str> = flags.need("groups")?.split(',').collect();
    let dir = flags.get("dir").unwrap_or("target/criterion");
    let mut lines = String::new();
    let mut found = 0;
    for bench in fs::read_dir(dir)? {
        let bench = bench?.path();
        if !bench.is_dir() {
            continue;
        }
        for case in fs::read_dir(&bench)? {
            let new = case?.path().join("new");
            let Ok(meta) = fs::read_to_string(new.join("benchmark.json")) else {
                continue;
            };
            let meta: serde_json::Value = serde_json::from_str(&meta)?;
            let (Some(group), Some(function)) =
                (meta["group_id"].as_str(), meta["function_id"].as_str())
            else {
                continue;
            };
            if !groups.contains(group) {
                continue;
            }
            let est: serde_json::Value =
                serde_json::from_str(&fs::read_to_string(new.join("estimates.json"))?)?;
            let ns = est["mean"]["point_estimate"]
                .as_f64()
                .ok_or_else(|| format!("{}: no mean", new.display()))?;
            writeln!(
                lines,
                "criterion,{group},{function},ns_per_op,{ns:.3},{run}"
            )?;
            found += 1;
        }
    }
    if let Some(log) = flags.get("log") {
        for line in fs::read_to_string(log)?.lines() {
            if let Some(row) = latency_line(line, &groups) {
                for (metric, value) in row.values {
                    writeln!(
                        lines,
                        "criterion_log,{},{},{metric},{value},{run}",
                        row.group, row.peer
                    )?;
                    found += 1;
                }
            }
        }
    }
    if found == 0 {
        return Err(format!("no results of the groups {groups:?} under {dir}").into());
    }
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(csv)?
        .write_all(lines.as_bytes())?;
    Ok(())
}

/// The figures of one `[group/peer] n=… p50=…µs p99=…µs … cpu=… cores` line.
#[derive(Debug)]
struct LatencyLine<'a> {
    group: &'a str,
    peer: &'a str,
    values: Vec<(&'static str, f64)>,
}

fn latency_line<'a>(line: &'a str, groups: &BTreeSet<&str>) -> Option<LatencyLine<'a>> {
    let (id, rest) = line.strip_prefix('[')?.split_once("] ")?;
    let (group, peer) = id.rsplit_once('/')?;
    if !groups.contains(group) || peer.contains(',') {
        return None;
    }
    let mut values = Vec::new();
    for word in rest.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let metric = match key {
            "p50" => "p50_us",
            "p99" => "p99_us",
            "cpu" => "cores",
            _ => continue,
        };
        let number = value.trim_end_matches(|c: char| !c.is_ascii_digit());
        values.push((metric, number.parse().ok()?));
    }
    (!values.is_empty()).then_some(LatencyLine {
        group,
        peer,
        values,
    })
}

// ------------------------------------------------------------------ results

/// One figure of one run.
#[derive(Debug)]
struct Row {
    source: String,
    case: String,
    system: String,
    metric: String,
    value: f64,
    run: u32,
}

/// Which way a figure is better: what its worst run is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Better {
    /// A time, a latency, memory: the worst run is the highest.
    Lower,
    /// A rate: the worst run is the lowest.
    Higher,
}

/// A figure over its runs.
#[derive(Debug, Clone)]
struct Stat {
    median: f64,
    worst: f64,
    runs: usize,
    /// Each run's value, by run number: for ratios within a run.
    by_run: Vec<(u32, f64)>,
}

impl Stat {
    /// The median over the runs both figures have of this one's value over
    /// the other's in the same run (the runs of a part are interleaved, so
    /// a run's figures met the same machine); `None` if they share no run.
    fn ratio(&self, other: &Stat) -> Option<f64> {
        let mut r: Vec<f64> = self
            .by_run
            .iter()
            .filter_map(|&(run, a)| {
                let (_, b) = other.by_run.iter().find(|&&(r, _)| r == run)?;
                (*b > 0.0).then(|| a / b)
            })
            .collect();
        r.sort_by(f64::total_cmp);
        r.get(r.len().checked_sub(1)? / 2).copied()
    }
}

#[derive(Debug)]
struct Results(Vec<Row>);

impl Results {
    fn load(path: &str) -> Result<Results> {
        let text = fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split(',').collect();
            if line.is_empty() || f[0] == "source" {
                continue;
            }
            let [source, case, system, metric, value, run] = f[..] else {
                return Err(format!("{path}:{}: not 6 fields: {line}", i + 1).into());
            };
            rows.push(Row {
                source: source.into(),
                case: case.into(),
                system: system.into(),
                metric: metric.into(),
                value: value
                    .parse()
                    .map_err(|e| format!("{path}:{}: {value}: {e}", i + 1))?,
                run: run
                    .parse()
                    .map_err(|e| format!("{path}:{}: {run}: {e}", i + 1))?,
            });
        }
        Ok(Results(rows))
    }

    /// The median and the worst of one figure's runs (the lower middle of
    /// an even count, as the scripts take it).
    fn stat(
        &self,
        source: &str,
        case: &str,
        system: &str,
        metric: &str,
        b: Better,
    ) -> Option<Stat> {
        let by_run: Vec<(u32, f64)> = self
            .0
            .iter()
            .filter(|r| {
                r.source == source && r.case == case && r.system == system && r.metric == metric
            })
            .map(|r| (r.run, r.value))
            .collect();
        if by_run.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = by_run.iter().map(|&(_, v)| v).collect();
        v.sort_by(f64::total_cmp);
        let worst = match b {
            Better::Lower => v[v.len() - 1],
            Better::Higher => v[0],
        };
        Some(Stat {
            median: v[(v.len() - 1) / 2],
            worst,
            runs: v.len(),
            by_run,
        })
    }
}

// ------------------------------------------------------------------ figures

/// A system as the plots show it: its name and its colour, the same in every
/// plot.
#[derive(Debug, Clone, Copy)]
struct System {
    /// The name in the CSV file.
    key: &'static str,
    /// The name in the legend.
    label: &'static str,
    color: RGBColor,
}

const SPINDLE: RGBColor = RGBColor(214, 39, 40);
const SPINDLE_LIGHT: RGBColor = RGBColor(245, 150, 140);
const TOKIO: RGBColor = RGBColor(31, 119, 180);
const MAY: RGBColor = RGBColor(44, 160, 44);
const GO: RGBColor = RGBColor(23, 170, 190);
const THREADS: RGBColor = RGBColor(120, 120, 120);
const FLOOR: RGBColor = RGBColor(200, 200, 200);

const fn sys(key: &'static str, label: &'static str, color: RGBColor) -> System {
    System { key, label, color }
}

/// How a panel's values read.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Nanos,
    Micros,
    Rps,
    KiB,
}

impl Unit {
    /// A value with its unit, to about three digits.
    fn show(self, v: f64) -> String {
        let three = |v: f64| {
            if v >= 100.0 {
                format!("{v:.0}")
            } else if v >= 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.2}")
            }
        };
        match self {
            Unit::Micros => Unit::Nanos.show(v * 1e3),
            Unit::Nanos if v < 1e3 => format!("{} ns", three(v)),
            Unit::Nanos if v < 1e6 => format!("{} µs", three(v / 1e3)),
            Unit::Nanos => format!("{} ms", three(v / 1e6)),
            Unit::Rps => format!("{}k", three(v / 1e3)),
            Unit::KiB => format!("{} KiB", three(v)),
        }
    }

    /// An axis tick: as [`Unit::show`], without trailing zeros.
    fn tick(self, v: f64) -> String {
        match self {
            Unit::Rps => format!("{:.0}k", v / 1e3),
            Unit::KiB => {
                let s = format!("{v:.1}");
                s.trim_end_matches(".0").to_string()
            }
            _ => {
                let s = self.show(v);
                let (n, unit) = s.split_once(' ').unwrap_or((&s, ""));
                let n = if n.contains('.') {
                    n.trim_end_matches('0').trim_end_matches('.')
                } else {
                    n
                };
                format!("{n} {unit}")
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
}

/// One chart: groups of bars, one group per category, one bar per system
/// that has a figure there.
#[derive(Debug)]
struct Panel {
    title: String,
    y_desc: String,
    unit: Unit,
    scale: Scale,
    categories: Vec<String>,
    /// Per system, its figure in each category.
    bars: Vec<(System, Vec<Option<Stat>>)>,
}

impl Panel {
    fn new(title: &str, y_desc: &str, unit: Unit, scale: Scale) -> Panel {
        Panel {
            title: title.into(),
            y_desc: y_desc.into(),
            unit,
            scale,
            categories: Vec::new(),
            bars: Vec::new(),
        }
    }

    /// Fills the panel from `results`: `cases` are (label, source, case,
    /// metric) per category, each system's figure found under its key.
    fn fill(
        mut self,
        results: &Results,
        systems: &[(System, &str)],
        cases: &[(&str, &str, &str, &str)],
        better: Better,
    ) -> Panel {
        self.categories = cases.iter().map(|c| c.0.to_string()).collect();
        for &(system, source_override) in systems {
            let stats: Vec<_> = cases
                .iter()
                .map(|&(_, source, case, metric)| {
                    let source = if source_override.is_empty() {
                        source
                    } else {
                        source_override
                    };
                    results.stat(source, case, system.key, metric, better)
                })
                .collect();
            if stats.iter().any(Option::is_some) {
                self.bars.push((system, stats));
            }
        }
        self
    }

    /// Every figure times `k` (bytes to KiB, say).
    fn times(mut self, k: f64) -> Panel {
        for (_, stats) in &mut self.bars {
            for st in stats.iter_mut().flatten() {
                st.median *= k;
                st.worst *= k;
                for (_, v) in &mut st.by_run {
                    *v *= k;
                }
            }
        }
        self
    }

    fn is_empty(&self) -> bool {
        self.bars.is_empty()
    }

    /// The Markdown table of this panel: median (worst, runs) per system and
    /// category, then spindle's ratio to each peer: the median over the runs
    /// of spindle's figure over the peer's in the same run.
    fn table(&self) -> String {
        let mut s = if self.title.is_empty() {
            String::from("| system |")
        } else {
            format!("### {}\n\n| system |", self.title)
        };
        for c in &self.categories {
            write!(s, " {c} |").unwrap();
        }
        s.push_str("\n|---|");
        s.push_str(&"--:|".repeat(self.categories.len()));
        s.push('\n');
        for (system, stats) in &self.bars {
            write!(s, "| {} |", system.label).unwrap();
            for st in stats {
                match st {
                    Some(st) => write!(
                        s,
                        " {} (worst {}, {} runs) |",
                        self.unit.show(st.median),
                        self.unit.show(st.worst),
                        st.runs
                    )
                    .unwrap(),
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
        if let Some((_, ours)) = self.bars.iter().find(|(sy, _)| sy.key == "spindle") {
            for (system, stats) in self.bars.iter().filter(|(sy, _)| sy.key != "spindle") {
                write!(s, "| spindle ÷ {} |", system.label).unwrap();
                for (a, b) in ours.iter().zip(stats) {
                    match (a, b) {
                        (Some(a), Some(b)) => match a.ratio(b) {
                            // Two significant digits for the small ones.
                            Some(r) if r < 0.1 => write!(s, " {r:.3}× |").unwrap(),
                            Some(r) => write!(s, " {r:.2}× |").unwrap(),
                            None => s.push_str(" – |"),
                        },
                        _ => s.push_str(" – |"),
                    }
                }
                s.push('\n');
            }
        }
        s
    }
}

/// The machine a run came from, as `report.sh` writes it.
#[derive(Debug)]
struct Machine {
    /// CPUs, model, kernel, toolchains.
    line: String,
    /// Per part of the run (`runtime`, `echo`, …): its commit and load.
    parts: Vec<(String, String)>,
}

impl Machine {
    fn load(path: &str) -> Result<Machine> {
        let text = fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let line = lines.next().unwrap_or_default().to_string();
        let parts = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(p, rest)| (p.to_string(), rest.to_string()))
            .collect();
        Ok(Machine { line, parts })
    }
}

/// A whole plot: panels in a grid, a legend, the machine underneath.
#[derive(Debug)]
struct Figure {
    file: &'static str,
    /// The parts of `report.sh` whose figures it draws.
    parts: &'static [&'static str],
    title: String,
    size: (u32, u32),
    /// Panels per row.
    columns: usize,
    panels: Vec<Panel>,
    /// Lines under the plot: what the bars are, where the figures come from.
    notes: Vec<String>,
}

/// Text in the plots; a family every SVG viewer has.
const FONT: &str = "sans-serif";

impl Figure {
    fn draw(&self, out: &Path, machine: &Machine) -> Result<PathBuf> {
        let path = out.join(self.file);
        let file = path.clone();
        let root = SVGBackend::new(&file, self.size).into_drawing_area();
        root.fill(&WHITE)?;
        let mut lines: Vec<String> = self.notes.clone();
        lines.push(format!("Machine: {}", machine.line));
        let runs: Vec<String> = machine
            .parts
            .iter()
            .filter(|(p, _)| self.parts.contains(&p.as_str()))
            .map(|(p, rest)| format!("{p}: {rest}"))
            .collect();
        if !runs.is_empty() {
            lines.push(format!("Run: {}", runs.join("; ")));
        }
        // About 7 pixels a character at the footer's size.
        let lines = wrap(&lines, (self.size.0 as usize - 28) / 7);
        let footer_h = 18 * lines.len() as u32 + 12;
        let (body, footer) = root.split_vertically(self.size.1 - footer_h);
        let (head, body) = body.split_vertically(62);
        head.draw(&Text::new(
            self.title.as_str(),
            (self.size.0 as i32 / 2, 8),
            TextStyle::from((FONT, 24).into_font().style(FontStyle::Bold))
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
        self.legend(&head)?;
        let rows = self.panels.len().div_ceil(self.columns);
        let cells = body.split_evenly((rows, self.columns));
        for (panel, area) in self.panels.iter().zip(cells.iter()) {
            draw_panel(panel, area)?;
        }
        let small = TextStyle::from((FONT, 14).into_font()).color(&RGBColor(60, 60, 60));
        for (i, line) in lines.iter().enumerate() {
            footer.draw(&Text::new(
                line.as_str(),
                (14, 6 + 18 * i as i32),
                small.clone(),
            ))?;
        }
        root.present()?;
        Ok(path)
    }

    /// One row of coloured squares and names, centred under the title: the
    /// systems of every panel, in the order they first appear.
    fn legend(&self, head: &DrawingArea<SVGBackend, Shift>) -> Result<()> {
        let mut seen: Vec<System> = Vec::new();
        for p in &self.panels {
            for (s, _) in &p.bars {
                if !seen.iter().any(|x| x.key == s.key) {
                    seen.push(*s);
                }
            }
        }
        let style = TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        // An estimate of each entry's width: square, gap, text at ~0.55 em
        // per character, spacing.
        let widths: Vec<i32> = seen
            .iter()
            .map(|s| 14 + 6 + (s.label.chars().count() as f64 * 8.0) as i32 + 26)
            .collect();
        let mut x = (self.size.0 as i32 - widths.iter().sum::<i32>()) / 2;
        let y = 46;
        for (s, w) in seen.iter().zip(widths) {
            head.draw(&Rectangle::new(
                [(x, y - 7), (x + 14, y + 7)],
                s.color.filled(),
            ))?;
            head.draw(&Text::new(s.label, (x + 20, y), style.clone()))?;
            x += w;
        }
        Ok(())
    }
}

/// Draws one panel: the axes, the bars (median), the whiskers (worst run)
/// and each bar's value.
fn draw_panel(p: &Panel, area: &DrawingArea<SVGBackend, Shift>) -> Result<()> {
    let n = p.categories.len();
    let values: Vec<f64> = p
        .bars
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().flat_map(|s| [s.median, s.worst]))
        .filter(|v| *v > 0.0)
        .collect();
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    // Bars per category and how wide a slot is (in category units).
    let per_cat: Vec<usize> = (0..n)
        .map(|i| p.bars.iter().filter(|(_, v)| v[i].is_some()).count())
        .collect();
    let slot = 0.84 / per_cat.iter().copied().max().unwrap_or(1).max(1) as f64;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(p.title.as_str(), (FONT, 19))
        .margin(12)
        .margin_right(20)
        .x_label_area_size(36)
        .y_label_area_size(78);
    // Categories at 0.5, 1.5, …; their names are drawn under the axis by
    // `bars` (a plain f64 axis has no ticks of our choosing).
    let x = 0f64..n as f64;
    // Values print above their bars, vertically: room for them on top.
    match p.scale {
        Scale::Log => {
            let lo = 10f64.powf((lo * 0.9).log10().floor());
            let hi = hi * 8.0;
            let mut chart = builder.build_cartesian_2d(x, (lo..hi).log_scale())?;
            bars(p, area, &per_cat, slot, lo, &mut chart)?;
        }
        Scale::Linear => {
            let mut chart = builder.build_cartesian_2d(x, 0f64..hi * 1.3)?;
            bars(p, area, &per_cat, slot, 0.0, &mut chart)?;
        }
    }
    Ok(())
}

/// The mesh and bars of a panel on its chart, whatever the y axis, and
/// the names of its categories under the x axis (on the panel's `area`);
/// `base` is the bottom of the axis (a log axis has no zero).
fn bars<Y>(
    p: &Panel,
    area: &DrawingArea<SVGBackend, Shift>,
    per_cat: &[usize],
    slot: f64,
    base: f64,
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
) -> Result<()>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let unit = p.unit;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_style((FONT, 14))
        .y_desc(p.y_desc.as_str())
        .axis_desc_style((FONT, 15))
        .y_label_formatter(&|v| unit.tick(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()?;
    let name_style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    let origin = area.get_base_pixel();
    for (i, name) in p.categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, base));
        area.draw(&Text::new(
            name.as_str(),
            (x - origin.0, y - origin.1 + 8),
            name_style.clone(),
        ))?;
    }
    let value_style = TextStyle::from((FONT, 13).into_font().transform(FontTransform::Rotate270))
        .pos(Pos::new(HPos::Left, VPos::Center));
    let mut nth = vec![0usize; per_cat.len()];
    for (system, stats) in &p.bars {
        for (i, st) in stats.iter().enumerate() {
            let Some(st) = st else { continue };
            // This category's bars, centred on it.
            let left = i as f64 + 0.5 - slot * per_cat[i] as f64 / 2.0 + slot * nth[i] as f64;
            nth[i] += 1;
            let (x0, x1) = (left + slot * 0.08, left + slot * 0.92);
            let xc = (x0 + x1) / 2.0;
            let top = st.median.max(base);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x0, base), (x1, top)],
                system.color.filled(),
            )))?;
            let whisker = st.worst.max(base);
            if (whisker - top).abs() > f64::EPSILON {
                let w = (x1 - x0) * 0.22;
                chart.draw_series([
                    PathElement::new(vec![(xc, top), (xc, whisker)], BLACK.stroke_width(1)),
                    PathElement::new(
                        vec![(xc - w, whisker), (xc + w, whisker)],
                        BLACK.stroke_width(1),
                    ),
                ])?;
            }
            // The value, upwards from a few pixels above the higher of bar
            // and whisker, whatever the scale.
            let shown = if st.median < base {
                format!("< {}", p.unit.tick(base))
            } else {
                p.unit.show(st.median)
            };
            chart.draw_series(std::iter::once(
                EmptyElement::at((xc, top.max(whisker)))
                    + Text::new(shown, (0, -4), value_style.clone()),
            ))?;
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ plots

/// `report plot`: every figure the results hold.
fn plot_all(flags: &Flags) -> Result<()> {
    let results = Results::load(flags.need("csv")?)?;
    let machine = Machine::load(flags.need("machine")?)?;
    let out = PathBuf::from(flags.need("out")?);
    fs::create_dir_all(&out)?;
    for figure in figures(&results) {
        if figure.panels.iter().all(Panel::is_empty) {
            eprintln!(
                "report: {}: no figures for it in the results, skipped",
                figure.file
            );
            continue;
        }
        let path = figure.draw(&out, &machine)?;
        println!("## {} ({})\n", figure.title, path.display());
        for p in &figure.panels {
            println!("{}", p.table());
        }
    }
    Ok(())
}

/// The plots of `docs/benchmarks.md`.
fn figures(r: &Results) -> Vec<Figure> {
    let spindle = sys("spindle", "spindle", SPINDLE);
    let tokio = sys("tokio", "tokio", TOKIO);
    let may = sys("may", "may", MAY);
    let go = sys("go", "Go", GO);
    let threads = sys("threads", "thread per connection", THREADS);
    let std = sys("std", "std thread", THREADS);
    let polling = sys(
        "spindle (polling)",
        "spindle, polling workers",
        SPINDLE_LIGHT,
    );
    let nospin = sys("spindle-nospin", "spindle, no spin", SPINDLE_LIGHT);
    let floor = sys("spin (floor)", "spin floor", FLOOR);
    // The runs of a source: the most any of its figures has.
    let runs = |source: &str| {
        let mut count = std::collections::BTreeMap::new();
        for row in r.0.iter().filter(|row| row.source == source) {
            *count
                .entry((row.case.as_str(), row.system.as_str(), row.metric.as_str()))
                .or_insert(0) += 1;
        }
        count.into_values().max().unwrap_or(0)
    };
    let bars_note = |n: usize| {
        match n {
        1 => "Bars: one run (one fresh process) per figure; a shared, noisy 2-vCPU VM.".to_string(),
        n => format!("Bars: the median of {n} fresh processes; whiskers: the worst of them; a shared, noisy 2-vCPU VM."),
    }
    };

    let cost = Panel::new(
        "",
        "time per operation (log scale)",
        Unit::Nanos,
        Scale::Log,
    )
    .fill(
        r,
        &[(spindle, ""), (tokio, ""), (may, ""), (go, "runtime_go")],
        &[
            (
                "spawn + join, per task",
                "criterion",
                "spawn_join",
                "ns_per_op",
            ),
            ("yield, per yield", "criterion", "yield", "ns_per_op"),
            (
                "ping-pong, per round trip",
                "criterion",
                "pingpong",
                "ns_per_op",
            ),
        ],
        Better::Lower,
    );

    let lateness = |d: &str, label: &str| {
        Panel::new(
            &format!("{label} sleeps"),
            "how late a sleep ends (log scale)",
            Unit::Micros,
            Scale::Log,
        )
        .fill(
            r,
            &[
                (spindle, ""),
                (polling, ""),
                (tokio, ""),
                (may, ""),
                (std, ""),
                (floor, ""),
            ],
            &[
                ("p50", "criterion_log", d, "p50_us"),
                ("p99", "criterion_log", d, "p99_us"),
            ],
            Better::Lower,
        )
    };

    let loads = [
        ("1 × 1 ms", "sleep_cpu", "1x1000us"),
        ("1 000 × 10 ms", "sleep_cpu", "1000x10000us"),
        ("10 000 × 100 ms", "sleep_cpu", "10000x100000us"),
    ];
    let with = |metric: &'static str| -> Vec<(&str, &str, &str, &str)> {
        loads.iter().map(|&(l, s, c)| (l, s, c, metric)).collect()
    };
    let sleepers = [
        (spindle, ""),
        (nospin, ""),
        (tokio, ""),
        (may, ""),
        (go, ""),
    ];
    let sleep_loads = vec![
        Panel::new(
            "how late, p50",
            "lateness (log scale)",
            Unit::Micros,
            Scale::Log,
        )
        .fill(r, &sleepers, &with("late_p50_us"), Better::Lower),
        Panel::new(
            "how late, p99",
            "lateness (log scale)",
            Unit::Micros,
            Scale::Log,
        )
        .fill(r, &sleepers, &with("late_p99_us"), Better::Lower),
        Panel::new(
            "CPU per sleep",
            "CPU time per sleep (log scale)",
            Unit::Micros,
            Scale::Log,
        )
        .fill(r, &sleepers, &with("cpu_us_per_sleep"), Better::Lower),
    ];

    let cells = [
        ("1 × 64 B", "1x64"),
        ("1 × 4 KiB", "1x4096"),
        ("64 × 64 B", "64x64"),
        ("64 × 4 KiB", "64x4096"),
        ("1000 × 64 B", "1000x64"),
        ("1000 × 4 KiB", "1000x4096"),
    ];
    let echo_cases = |metric: &'static str| -> Vec<(&str, &str, &str, &str)> {
        cells
            .iter()
            .map(|&(l, c)| (l, "echo_per_core", c, metric))
            .collect()
    };
    let servers = [
        (spindle, ""),
        (tokio, ""),
        (may, ""),
        (go, ""),
        (threads, ""),
    ];
    let echo = vec![
        Panel::new(
            "throughput (higher is better)",
            "requests per second",
            Unit::Rps,
            Scale::Linear,
        )
        .fill(r, &servers, &echo_cases("rps"), Better::Higher),
        Panel::new(
            "round trip p99 (lower is better)",
            "p99 round trip (log scale)",
            Unit::Micros,
            Scale::Log,
        )
        .fill(r, &servers, &echo_cases("p99_us"), Better::Lower),
    ];
    let idle_case =
        r.0.iter()
            .find(|row| row.source == "echo_per_core" && row.case.starts_with("idle_"))
            .map(|row| row.case.clone())
            .unwrap_or_else(|| "idle_10000".into());
    let idle_n: String = idle_case.trim_start_matches("idle_").into();
    let memory = vec![
        Panel::new(
            &format!("an idle TCP connection ({} held)", thousands(&idle_n)),
            "KiB per connection",
            Unit::KiB,
            Scale::Linear,
        )
        .fill(
            r,
            &servers,
            &[(
                "server's VmRSS growth ÷ connections",
                "echo_per_core",
                idle_case.as_str(),
                "bytes_per_conn",
            )],
            Better::Lower,
        )
        .times(1.0 / 1024.0),
        Panel::new(
            "a sleeping task (100 000 asleep)",
            "KiB per task",
            Unit::KiB,
            Scale::Linear,
        )
        .fill(
            r,
            &[(spindle, ""), (tokio, ""), (go, "")],
            &[(
                "VmRSS growth ÷ tasks",
                "cold_start",
                "many_sleepers",
                "kib_per_task",
            )],
            Better::Lower,
        ),
    ];

    vec![
        Figure {
            file: "cost_per_op.svg",
            parts: &["runtime"],
            title: "Cost per operation, 2 workers each (lower is better)".into(),
            size: (1000, 620),
            columns: 1,
            panels: vec![cost],
            notes: vec![
                bars_note(runs("criterion")),
                "spindle, tokio, may: cargo bench --bench runtime (criterion); Go: benches/peers/runtime.go, the same workloads (GOMAXPROCS=2).".into(),
                "Go has no join handles: its spawn + join waits on a sync.WaitGroup. may spawns in batches of 20 000, the others 200 000.".into(),
            ],
        },
        Figure {
            file: "sleep_lateness.svg",
            parts: &["sleep"],
            title: "How late a lone sleeper wakes, 2 workers each (lower is better)".into(),
            size: (1200, 600),
            columns: 2,
            panels: vec![lateness("sleep_lateness/1ms", "1 ms"), lateness("sleep_lateness/100us", "100 µs")],
            notes: vec![
                bars_note(runs("criterion_log")),
                "cargo bench --bench sleep -- '^sleep_lateness/': one sleeper at a time on an idle runtime; the spin floor is a thread that spins on the clock.".into(),
                "Polling workers: Builder::sleep_spin(Duration::MAX), a core for precision. tokio's timer wheel has a 1 ms resolution.".into(),
            ],
        },
        Figure {
            file: "sleep_loads.svg",
            parts: &["sleep_cpu"],
            title: "Many sleepers: lateness and CPU per sleep, 2 workers each (lower is better)".into(),
            size: (1400, 600),
            columns: 3,
            panels: sleep_loads,
            notes: vec![
                bars_note(runs("sleep_cpu")),
                "bash benches/sleep_cpu.sh: tasks × sleep length, each task looping over its sleeps; CPU is the whole process's (getrusage) over 3 s, after 1 s to settle.".into(),
            ],
        },
        Figure {
            file: "echo_per_core.svg",
            parts: &["echo"],
            title: "TCP echo per core: the server on one CPU with one worker, the client on the other".into(),
            size: (1200, 960),
            columns: 1,
            panels: echo,
            notes: vec![
                bars_note(runs("echo_per_core")),
                "bash benches/echo.sh --per-core: connections × message size, each connection closed-loop from one mio client thread; taskset pins both.".into(),
                "Thread per connection: every thread on the server's CPU. Go: GOMAXPROCS=1.".into(),
            ],
        },
        Figure {
            file: "memory_per_task.svg",
            parts: &["echo", "cold_start"],
            title: "Resident memory per idle connection and per sleeping task (lower is better)".into(),
            size: (1200, 600),
            columns: 2,
            panels: memory,
            notes: vec![
                "Left: bash benches/echo.sh --per-core, one measurement per server, each connection served once (a 4 KiB buffer in every server).".into(),
                "Right: bash benches/cold_start.sh, 100 000 tasks asleep on a fresh 2-worker runtime (Go: GOMAXPROCS=2), default stacks.".into(),
                bars_note(runs("cold_start")),
            ],
        },
    ]
}

/// `lines` broken at spaces into lines of at most `width` characters (a word
/// longer than that stays whole), continuations indented.
fn wrap(lines: &[String], width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines {
        let mut cur = String::new();
        for word in line.split(' ') {
            if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
                out.push(std::mem::take(&mut cur));
                cur.push_str("    ");
            } else if !cur.is_empty() && !cur.ends_with("    ") {
                cur.push(' ');
            }
            cur.push_str(word);
        }
        out.push(cur);
    }
    out
}

/// `10000` as `10 000`.
fn thousands(n: &str) -> String {
    let digits: Vec<char> = n.chars().collect();
    let mut s = String::new();
    for (i, c) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            s.push(' ');
        }
        s.push(*c);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_well() {
        assert_eq!(Unit::Nanos.show(17.24), "17.2 ns");
        assert_eq!(Unit::Nanos.show(361.0), "361 ns");
        assert_eq!(Unit::Nanos.show(15_000.0), "15.0 µs");
        assert_eq!(Unit::Micros.show(1094.0), "1.09 ms");
        assert_eq!(Unit::Micros.tick(1000.0), "1 ms");
        assert_eq!(Unit::Rps.show(26_496.0), "26.5k");
        assert_eq!(Unit::KiB.show(8954.0 / 1024.0), "8.74 KiB");
        assert_eq!(Unit::KiB.tick(2.0), "2");
        assert_eq!(Unit::KiB.tick(2.5), "2.5");
    }

    #[test]
    fn a_latency_line_is_read() {
        let groups = BTreeSet::from(["sleep_lateness/1ms"]);
        let l = latency_line(
            "[sleep_lateness/1ms/spindle (polling)] n=1745 p50=3.8µs p99=21.7µs mean=5.0µs max=80.1µs early=0 cpu=0.18 cores, 1.2 µs per operation",
            &groups,
        )
        .unwrap();
        assert_eq!(
            (l.group, l.peer),
            ("sleep_lateness/1ms", "spindle (polling)")
        );
        assert_eq!(
            l.values,
            vec![("p50_us", 3.8), ("p99_us", 21.7), ("cores", 0.18)]
        );
        assert!(latency_line("[sleep_lateness/100us/std] n=1 p50=1µs", &groups).is_none());
    }

    #[test]
    fn median_and_worst() {
        let row = |system: &str, v: f64, run: u32| Row {
            source: "s".into(),
            case: "c".into(),
            system: system.into(),
            metric: "m".into(),
            value: v,
            run,
        };
        let r = Results(vec![
            row("x", 3.0, 1),
            row("x", 1.0, 2),
            row("x", 2.0, 3),
            row("x", 9.0, 4),
            row("y", 6.0, 1),
            row("y", 1.0, 2),
            row("y", 8.0, 3),
        ]);
        let st = r.stat("s", "c", "x", "m", Better::Lower).unwrap();
        assert_eq!((st.median, st.worst, st.runs), (2.0, 9.0, 4));
        let y = r.stat("s", "c", "y", "m", Better::Lower).unwrap();
        // Runs 1-3 in common: 0.5, 1.0, 0.25.
        assert_eq!(st.ratio(&y), Some(0.5));
        let st = r.stat("s", "c", "x", "m", Better::Higher).unwrap();
        assert_eq!(st.worst, 1.0);
        assert_eq!(thousands("10000"), "10 000");
        let w = wrap(&["aaa bbb ccc".to_string()], 7);
        assert_eq!(w, vec!["aaa bbb".to_string(), "    ccc".to_string()]);
    }
}
