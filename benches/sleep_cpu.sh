#!/usr/bin/env bash
# CPU per sleep: many tasks looping over sleeps, spindle beside tokio, may,
# Go (peers/sleep_cpu.go, where `go` is installed) and spindle with
# `sleep_spin(0)`, each in a fresh process, interleaved run by run. Each run
# settles for 1 s, then measures the process's CPU time (getrusage) per
# sleep completed over `secs` seconds, with how late the sleeps ended.
#
#   bash benches/sleep_cpu.sh            # 3 runs of 3 s per load
#   bash benches/sleep_cpu.sh --quick    # 1 run of 1 s (for CI)
#
# Loads (tasks x sleep): 1 000 x 10 ms, 10 000 x 100 ms, 1 x 1 ms; and an
# idle runtime (no task) over 10 s (2 s with --quick), whose CPU should be
# nil. Two workers each (GOMAXPROCS=2). Cells are medians of the runs. With
# --csv FILE every run's figures are also appended to FILE, one per line, as
# `source,case,system,metric,value,run` (what benches/report.sh plots).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 secs=3 idle_secs=10 csv=""
systems="spindle spindle-nospin tokio may go"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=1 secs=1 idle_secs=2; shift ;;
    --runs) runs=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--runs N] [--secs S] [--systems LIST] [--csv FILE]" >&2; exit 2 ;;
  esac
done

# shellcheck source=peers/build.sh
source benches/peers/build.sh
build_with_go_peer sleep_cpu sleep_cpu.go

loads=("1000 10000" "10000 100000" "1 1000")
results=$(mktemp)
for run in $(seq "$runs"); do
  for load in "${loads[@]}" "idle"; do
    for sys in $systems; do
      if [ "$load" = idle ]; then
        [ "$sys" = spindle-nospin ] && continue
        set -- 0 1000
        s=$idle_secs
      else
        set -- $load
        s=$secs
      fi
      log "run $run: $sys $load"
      if [ "$sys" = go ]; then
        line=$("$go_bin" "$1" "$2" "$s")
      else
        line=$("$rust_bin" "$sys" "$1" "$2" "$s")
      fi
      echo "$line run=$run" >>"$results"
    done
  done
done

python3 - "$results" "$systems" "$csv" <<'PY'
import re, statistics, sys
rows = {}
csv = open(sys.argv[3], "a") if sys.argv[3] else None
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    rows.setdefault((kv["n"], kv["d_us"], kv["system"]), []).append(kv)
    for key in ("cpu_us_per_sleep", "cores", "late_p50_us", "late_p99_us"):
        if csv:
            csv.write(f"sleep_cpu,{kv['n']}x{kv['d_us']}us,{kv['system']},{key},{kv[key]},{kv['run']}\n")
systems = sys.argv[2].split()
def med(key, k):
    v = [float(r[k]) for r in rows.get(key, [])]
    return statistics.median(v) if v else None
print("| load | system | CPU per sleep | cores | late p50 / p99 |")
print("|---|---|---|---|---|")
for n, d in [("1000", "10000"), ("10000", "100000"), ("1", "1000")]:
    label = f"{int(n):,} x {int(d) / 1000:g} ms"
    for s in systems:
        key = (n, d, s)
        if key not in rows:
            continue
        print(f"| {label} | {s} | {med(key, 'cpu_us_per_sleep'):.2f} µs | {med(key, 'cores'):.3f} "
              f"| {med(key, 'late_p50_us'):.1f} / {med(key, 'late_p99_us'):.1f} µs |")
for s in systems:
    key = ("0", "1000", s)
    if key in rows:
        print(f"| idle runtime, no task | {s} | - | {med(key, 'cores'):.4f} | - |")
PY
rm -f "$results"
