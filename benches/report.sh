#!/usr/bin/env bash
# The benchmark report: runs the benchmarks behind the plots of
# docs/benchmarks.md, then draws them (src/bin/report.rs) into docs/bench/.
#
#   bash benches/report.sh               # every run, then the plots (about 40 min)
#   bash benches/report.sh --plots-only  # redraw docs/bench/*.svg from docs/bench/results.csv
#   bash benches/report.sh --quick       # one short run of each, for a try (not for the docs)
#
# Other flags: --runs N (fresh processes per figure, default 3), --out DIR
# (default docs/bench).
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
# run`), the machine in OUT/machine.txt, the tables behind the plots (with
# spindle's ratios) in OUT/summary.md. Go is used where installed
# (apt install golang-go); its bars are missing otherwise. The criterion
# benches are built by cargo and then run directly (as `cargo bench` runs
# them), so that a niced cargo (`nice -n 19`, for a shared machine) does not
# nice the benchmarks too.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 out=docs/bench plots_only="" quick=""
while [ $# -gt 0 ]; do
  case "$1" in
    --plots-only) plots_only=1; shift ;;
    --quick) quick=1 runs=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--plots-only] [--quick] [--runs N] [--out DIR]" >&2; exit 2 ;;
  esac
done

log() { printf '%s\n' "$*" >&2; }
cargo build --release -q -p spindle-benches --bin report
report=target/release/report
mkdir -p "$out"
csv=$out/results.csv

draw() {
  "$report" plot --csv "$csv" --machine "$out/machine.txt" --out "$out" >"$out/summary.md"
  log "plots in $out, the tables behind them in $out/summary.md"
}

if [ -n "$plots_only" ]; then
  draw
  exit 0
fi

# ---------------------------------------------------------------- machine
{
  echo "$(nproc) vCPUs, $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
  echo "Linux $(uname -r)"
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (modified)')"
  echo "$(rustc --version | cut -d' ' -f1-2)"
  if command -v go >/dev/null; then go version | cut -d' ' -f3; fi
} | paste -sd';' | sed 's/;/; /g' >"$out/machine.txt"
log "machine: $(cat "$out/machine.txt")"
echo "source,case,system,metric,value,run" >"$csv"

# ---------------------------------------------------------------- criterion
go_bin=""
if command -v go >/dev/null; then
  go_bin=$(mktemp -d)/runtime_go
  (cd benches/peers && GOCACHE=${GOCACHE:-$PWD/../../target/go-build} go build -o "$go_bin" runtime.go)
else
  log "go is not installed: Go's bars are left out"
fi
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
runtime_bench=$(bench_exe runtime)
sleep_bench=$(bench_exe sleep)
export CRITERION_HOME=$PWD/target/criterion
stderr=$(mktemp)
for run in $(seq "$runs"); do
  log "run $run of $runs: cargo bench --bench runtime"
  "$runtime_bench" --bench "${quick_args[@]}" >/dev/null 2>"$stderr" || { cat "$stderr" >&2; exit 1; }
  "$report" criterion --csv "$csv" --run "$run" --dir "$CRITERION_HOME" \
    --groups spawn_join,spawn_join_outside,yield,pingpong
  log "run $run of $runs: cargo bench --bench sleep -- '^sleep_lateness/'"
  "$sleep_bench" --bench '^sleep_lateness/' "${quick_args[@]}" >/dev/null 2>"$stderr" ||
    { cat "$stderr" >&2; exit 1; }
  "$report" criterion --csv "$csv" --run "$run" --dir "$CRITERION_HOME" --log "$stderr" \
    --groups sleep_lateness/1ms,sleep_lateness/100us
  if [ -n "$go_bin" ]; then
    for case in spawn_join yield pingpong; do
      log "run $run of $runs: peers/runtime.go $case"
      "$go_bin" "$case" | awk -v run="$run" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        printf "runtime_go,%s,%s,ns_per_op,%s,%s\n", f["case"], f["system"], f["ns_per_op"], run
      }' >>"$csv"
    done
  fi
done
rm -f "$stderr"

# ---------------------------------------------------------------- scripts
if [ -n "$quick" ]; then
  bash benches/sleep_cpu.sh --quick --csv "$csv" >&2
  bash benches/cold_start.sh --quick --csv "$csv" >&2
  bash benches/echo.sh --per-core --quick --idle 2000 --csv "$csv" >&2
else
  bash benches/sleep_cpu.sh --runs "$runs" --csv "$csv" >&2
  bash benches/cold_start.sh --runs "$runs" --csv "$csv" >&2
  bash benches/echo.sh --per-core --runs "$runs" --csv "$csv" >&2
fi

draw
