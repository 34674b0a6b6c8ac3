#!/usr/bin/env bash
# The cold-start benchmarks: each case in a fresh process, spindle beside
# tokio and Go (peers/cold_start.go, where `go` is installed), interleaved
# run by run so that the machine's drift hits every system alike.
#
#   bash benches/cold_start.sh            # 3 runs of every case
#   bash benches/cold_start.sh --quick    # 1 run, 100 000 sleepers and
#                                         # 20 000 spawns (for CI)
#
# Cases (src/bin/cold_start.rs says exactly what each measures):
#   - many_sleepers_1m: 1 000 000 tasks that sleep 1 s, spawned from a plain
#     thread on a fresh 2-worker runtime (GOMAXPROCS=2), joined: wall time,
#     and resident memory per task once every task has started;
#   - many_sleepers: the same with 100 000 tasks;
#   - spawn_join_task / spawn_join_thread: 200 000 empty tasks spawned, then
#     joined, from a task or from the plain main thread: ns per task;
#   - spawn_wait_task / spawn_wait_thread: the same with detached tasks
#     counted down, the shape of Go's WaitGroup (Go's two rows are the same
#     program: it has no join handles).
#
# Every cell is the median of its runs; the last column is spindle's over
# the best peer's (below 1 is better for time, for memory too). With
# --csv FILE every run's figures are also appended to FILE, one per line, as
# `source,case,system,metric,value,run` (what benches/report.sh plots).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 sleepers_1m=1000000 sleepers=100000 spawns=200000 csv=""
systems="spindle tokio go"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=1 sleepers_1m=0 sleepers=100000 spawns=20000; shift ;;
    --runs) runs=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--runs N] [--systems LIST] [--csv FILE]" >&2; exit 2 ;;
  esac
done

# shellcheck source=peers/build.sh
source benches/peers/build.sh
build_with_go_peer cold_start cold_start.go

# case label, case argument, n
cases=()
[ "$sleepers_1m" -gt 0 ] && cases+=("many_sleepers_1m sleepers $sleepers_1m")
cases+=("many_sleepers sleepers $sleepers")
cases+=("spawn_join_task spawn_join_task $spawns")
cases+=("spawn_join_thread spawn_join_thread $spawns")
cases+=("spawn_wait_task spawn_wait_task $spawns")
cases+=("spawn_wait_thread spawn_wait_thread $spawns")

results=$(mktemp)
for run in $(seq "$runs"); do
  for c in "${cases[@]}"; do
    read -r label arg n <<<"$c"
    for sys in $systems; do
      log "run $run: $label $sys"
      if [ "$sys" = go ]; then
        line=$("$go_bin" "$arg" "$n")
      else
        line=$("$rust_bin" "$sys" "$arg" "$n" 2>/dev/null)
      fi
      echo "$label $sys $line run=$run" >>"$results"
    done
  done
done

python3 - "$results" "$systems" "$csv" <<'PY'
import re, statistics, sys
rows = {}
csv = open(sys.argv[3], "a") if sys.argv[3] else None
for line in open(sys.argv[1]):
    label, system, rest = line.split(None, 2)
    kv = dict(re.findall(r"(\w+)=(\S+)", rest))
    rows.setdefault((label, system), []).append(kv)
    for key in ("wall_ms", "ns_per_task", "kib_per_task"):
        if csv and kv.get(key, "-") != "-":
            csv.write(f"cold_start,{label},{system},{key},{kv[key]},{kv['run']}\n")
systems = sys.argv[2].split()
labels = list(dict.fromkeys(l for l, _ in rows))
def med(label, system, key):
    vals = [float(r[key]) for r in rows.get((label, system), []) if r.get(key, "-") != "-"]
    return statistics.median(vals) if vals else None
def fmt(v, unit):
    return "-" if v is None else f"{v:,.0f} {unit}" if unit != "KiB" else f"{v:.2f} KiB"
print("| case | " + " | ".join(systems) + " | spindle / best peer |")
print("|---" * (len(systems) + 2) + "|")
for label in labels:
    key, unit = ("wall_ms", "ms") if label.startswith("many") else ("ns_per_task", "ns/task")
    cells = {s: med(label, s, key) for s in systems}
    peers = [v for s, v in cells.items() if s != "spindle" and v is not None]
    ratio = f"{cells['spindle'] / min(peers):.2f}x" if peers and cells.get("spindle") else "-"
    print(f"| {label} | " + " | ".join(fmt(cells[s], unit) for s in systems) + f" | {ratio} |")
    if label.startswith("many"):
        cells = {s: med(label, s, "kib_per_task") for s in systems}
        peers = [v for s, v in cells.items() if s != "spindle" and v is not None]
        ratio = f"{cells['spindle'] / min(peers):.2f}x" if peers and cells.get("spindle") else "-"
        print(f"| {label}, resident per task | " + " | ".join(fmt(cells[s], "KiB") for s in systems) + f" | {ratio} |")
PY
rm -f "$results"
