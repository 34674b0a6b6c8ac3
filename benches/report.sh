#!/usr/bin/env bash
# The benchmark report: runs the benchmarks behind the plots of
# docs/benchmarks.md, then draws them (src/bin/report.rs) into docs/bench/.
#
#   bash benches/report.sh               # every run, then the plots (about 40 min)
#   bash benches/report.sh --plots-only  # redraw docs/bench/*.svg from docs/bench/results.csv
#   bash benches/report.sh --quick       # one short run of each, for a try (not for the docs)
#   bash benches/report.sh --only echo   # run one part again, keep the others' figures
#
# Other flags: --runs N (fresh processes per figure, default 3), --out DIR
# (default docs/bench), --only "PART..." among runtime, sleep, sleep_cpu,
# cold_start, echo (default all of them).
#
# What it runs, each figure in fresh processes, interleaved run by run so
# that the machine's drift hits every system alike:
#   - `cargo bench --bench runtime` (its four groups) and peers/runtime.go:
#     cost per operation (cost_per_op.svg: spawn_join, yield, pingpong);
#   - `cargo bench --bench sleep -- '^sleep_lateness/'`: a lone sleeper's
#     lateness, p50 and p99 from the bench's stderr (sleep_lateness.svg);
#   - benches/sleep_cpu.sh: many sleepers' lateness and CPU (sleep_loads.svg);
#   - benches/echo.sh --per-core: echo throughput and p99, each server on one
#     CPU with one worker and the client on the other, and the memory of an
#     idle connection (echo_per_core.svg, memory_per_task.svg);
#   - benches/cold_start.sh: memory per sleeping task (memory_per_task.svg).
#
# Every figure lands in OUT/results.csv (`source,case,system,metric,value,
# run`), the machine in OUT/machine.txt (with the commit each part ran at and
# the load average around it: the machine may be shared), the tables behind
# the plots (with spindle's ratios) in OUT/summary.md, and what the runs
# printed in target/bench-report/. Go is used where installed
# (apt install golang-go); its bars are missing otherwise. The criterion
# benches are built by cargo and then run directly (as `cargo bench` runs
# them), so that a niced cargo (`nice -n 19`, for a shared machine) does not
# nice the benchmarks too.
set -euo pipefail
cd "$(dirname "$0")/.."

all_parts="runtime sleep sleep_cpu cold_start echo"
runs=3 out=docs/bench plots_only="" quick="" parts=$all_parts
while [ $# -gt 0 ]; do
  case "$1" in
    --plots-only) plots_only=1; shift ;;
    --quick) quick=1 runs=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) parts=$2; shift 2 ;;
    *) echo "usage: $0 [--plots-only] [--quick] [--runs N] [--out DIR] [--only \"PART...\"]" >&2; exit 2 ;;
  esac
done
for part in $parts; do
  [[ " $all_parts " == *" $part "* ]] || { echo "unknown part $part (parts: $all_parts)" >&2; exit 2; }
done
doing() { [[ " $parts " == *" $1 "* ]]; }

log() { printf '%s\n' "$*" >&2; }
cargo build --release -q -p spindle-benches --bin report
report=target/release/report
logs=target/bench-report
mkdir -p "$out" "$logs"
csv=$out/results.csv
machine=$out/machine.txt

draw() {
  "$report" plot --csv "$csv" --machine "$machine" --out "$out" >"$out/summary.md"
  log "plots in $out, the tables behind them in $out/summary.md"
}

if [ -n "$plots_only" ]; then
  draw
  exit 0
fi

# ---------------------------------------------------------------- machine
# The first line is the machine (CPUs, model, kernel, toolchains); then one
# line per part run: its commit and the load average (1 min) before and
# after it. A partial run (--only) replaces its parts' lines and figures.
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (modified)')"
load() { cut -d' ' -f1 /proc/loadavg; }
machine_line="$(nproc) vCPUs, $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo); Linux $(uname -r); $(rustc --version | cut -d' ' -f1-2)"
command -v go >/dev/null && machine_line+="; $(go version | cut -d' ' -f3)"
declare -A sources=([runtime]="criterion runtime_go" [sleep]="criterion_log" [sleep_cpu]="sleep_cpu"
  [cold_start]="cold_start" [echo]="echo_per_core")
if [ "$parts" = "$all_parts" ] || [ ! -s "$csv" ] || [ ! -s "$machine" ]; then
  echo "source,case,system,metric,value,run" >"$csv"
  echo "$machine_line" >"$machine"
else
  drop=""
  for part in $parts; do drop+=" ${sources[$part]}"; done
  awk -F, -v drop="$drop" 'BEGIN { n = split(drop, d, " "); for (i = 1; i <= n; i++) gone[d[i]] = 1 }
    !($1 in gone)' "$csv" >"$csv.keep" && mv "$csv.keep" "$csv"
  { echo "$machine_line"
    tail -n +2 "$machine" | awk -v parts=" $parts " '{ split($1, p, ":"); if (index(parts, " " p[1] " ") == 0) print }'
  } >"$machine.new" && mv "$machine.new" "$machine"
fi
log "machine: $machine_line"
# part_done PART LOAD_BEFORE: records the part's commit and load.
part_done() { echo "$1: commit $commit, load average $2 before, $(load) after" >>"$machine"; }

# ---------------------------------------------------------------- criterion
if [ -n "$quick" ]; then
  quick_args=(--warm-up-time 0.2 --measurement-time 0.5)
else
  quick_args=()
fi
# bench_exe NAME: the executable `cargo bench --bench NAME` runs.
bench_exe() {
  cargo bench -q -p spindle-benches --bench "$1" --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["executable"])'
}
export CRITERION_HOME=$PWD/target/criterion
go_bin=""
if doing runtime; then
  runtime_bench=$(bench_exe runtime)
  if command -v go >/dev/null; then
    go_bin=$(mktemp -d)/runtime_go
    (cd benches/peers && GOCACHE=${GOCACHE:-$PWD/../../target/go-build} go build -o "$go_bin" runtime.go)
  else
    log "go is not installed: Go's bars are left out"
  fi
fi
doing sleep && sleep_bench=$(bench_exe sleep)
if doing runtime || doing sleep; then
  load0=$(load)
  for run in $(seq "$runs"); do
    if doing runtime; then
      log "run $run of $runs: cargo bench --bench runtime"
      "$runtime_bench" --bench "${quick_args[@]}" >"$logs/runtime-$run.log" 2>&1 ||
        { cat "$logs/runtime-$run.log" >&2; exit 1; }
      "$report" criterion --csv "$csv" --run "$run" --dir "$CRITERION_HOME" \
        --groups spawn_join,spawn_join_outside,yield,pingpong
      if [ -n "$go_bin" ]; then
        for case in spawn_join yield pingpong; do
          log "run $run of $runs: peers/runtime.go $case"
          "$go_bin" "$case" | tee -a "$logs/runtime-$run.log" | awk -v run="$run" '{
            for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
            printf "runtime_go,%s,%s,ns_per_op,%s,%s\n", f["case"], f["system"], f["ns_per_op"], run
          }' >>"$csv"
        done
      fi
    fi
    if doing sleep; then
      log "run $run of $runs: cargo bench --bench sleep -- '^sleep_lateness/'"
      "$sleep_bench" --bench '^sleep_lateness/' "${quick_args[@]}" >"$logs/sleep-$run.log" 2>&1 ||
        { cat "$logs/sleep-$run.log" >&2; exit 1; }
      "$report" criterion --csv "$csv" --run "$run" --dir "$CRITERION_HOME" --log "$logs/sleep-$run.log" \
        --groups sleep_lateness/1ms,sleep_lateness/100us
    fi
  done
  doing runtime && part_done runtime "$load0"
  doing sleep && part_done sleep "$load0"
fi

# ---------------------------------------------------------------- scripts
if [ -n "$quick" ]; then
  args=(--quick) echo_args=(--quick --idle 2000)
else
  args=(--runs "$runs") echo_args=(--runs "$runs")
fi
for part in sleep_cpu cold_start echo; do
  doing "$part" || continue
  load0=$(load)
  case $part in
    echo) bash benches/echo.sh --per-core "${echo_args[@]}" --csv "$csv" >"$logs/$part.log" ;;
    *) bash benches/$part.sh "${args[@]}" --csv "$csv" >"$logs/$part.log" ;;
  esac
  part_done "$part" "$load0"
done

draw
