#!/usr/bin/env bash
# The channel benchmarks: each case in a fresh process, spindle beside
# tokio, may, crossbeam-channel and std::sync::mpsc (on std threads) and Go
# (peers/channels.go, where `go` is installed), interleaved run by run so
# that the machine's drift hits every system alike.
#
#   bash benches/channels.sh            # 3 runs of every case
#   bash benches/channels.sh --quick    # 1 short run (for CI)
#   bash benches/channels.sh --raw FILE # also keep every run's line in FILE
#
# Cases (src/bin/channels.rs says exactly what each measures), two workers
# (GOMAXPROCS=2) each, the runtimes' tasks spawned from a task:
#   - pingpong_bounded1 / pingpong_bounded0 / pingpong_unbounded: a token
#     passed back and forth between two tasks through two channels of bound
#     1, 0 (rendezvous) or none: 1 000 000 round trips or 3 s of them,
#     whichever ends first; ns per round trip;
#   - oneway_1p / oneway_4p: 10 000 000 u64s sent by 1 or 4 producers
#     through one unbounded channel (Go: buffered to 4096) to one consumer;
#     millions of messages per second.
#
# Every cell is the median of its runs and, in brackets, the worst; "-"
# where a system has no such channel. The ratios are of the medians. The ratios are spindle's time per operation over each peer's
# (per round trip, or per message: the peer's rate over spindle's), so below
# 1 spindle is faster; the goal column checks spindle against the best
# peer: ping-pong at most 0.7 of its time, one-way at least its rate. Last,
# how many ping-pong runs had their two tasks on two workers (a pair on one
# worker hands over by switching, on two by waking the other thread).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 rts=1000000 budget_ms=3000 msgs=10000000 raw=
systems="spindle tokio may crossbeam std go"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=1 rts=50000 budget_ms=300 msgs=1000000; shift ;;
    --runs) runs=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--runs N] [--systems LIST] [--raw FILE]" >&2; exit 2 ;;
  esac
done

# shellcheck source=peers/build.sh
source benches/peers/build.sh
build_with_go_peer channels channels.go

# case, n, budget (ms; pingpong only)
cases=(
  "pingpong_bounded1 $rts $budget_ms"
  "pingpong_bounded0 $rts $budget_ms"
  "pingpong_unbounded $rts $budget_ms"
  "oneway_1p $msgs"
  "oneway_4p $msgs"
)

results=$(mktemp)
for run in $(seq "$runs"); do
  for c in "${cases[@]}"; do
    read -r case n budget <<<"$c"
    for sys in $systems; do
      log "run $run: $case $sys"
      if [ "$sys" = go ]; then
        line=$("$go_bin" "$case" "$n" $budget)
      else
        line=$("$rust_bin" "$sys" "$case" "$n" $budget)
      fi
      echo "$line" >>"$results"
    done
  done
done

python3 - "$results" "$systems" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    rows.setdefault((kv["case"], kv["system"]), []).append(kv)
systems = sys.argv[2].split()
cases = list(dict.fromkeys(c for c, _ in rows))
def runs(case, system):
    return [float(r["value"]) for r in rows.get((case, system), []) if r["value"] != "-"]
def med(case, system):
    vals = runs(case, system)
    return statistics.median(vals) if vals else None
def cost(case, v):
    # Time per operation, whatever the unit: per round trip, or per message.
    return None if v is None else v if case.startswith("pingpong") else 1 / v
def worst(case, system):
    # The run with the highest cost per operation.
    vals = runs(case, system)
    return max(vals, key=lambda v: cost(case, v)) if vals else None
print("| case | " + " | ".join(systems) + " | best peer | spindle / best | goal |")
print("|---" * (len(systems) + 4) + "|")
ratio_lines = []
for case in cases:
    ping = case.startswith("pingpong")
    unit = "ns" if ping else "M/s"
    cells = {s: med(case, s) for s in systems}
    num = lambda v: f"{v:,.0f}" if ping else f"{v:.1f}"
    def fmt(s):
        v = cells[s]
        return "-" if v is None else f"{num(v)} ({num(worst(case, s))}) {unit}"
    peers = {s: v for s, v in cells.items() if s != "spindle" and v is not None}
    sp = cells.get("spindle")
    best, ratio, goal = "-", "-", "-"
    if peers:
        b = min(peers, key=lambda s: cost(case, peers[s]))
        best = b
        if sp is not None:
            r = cost(case, sp) / cost(case, peers[b])
            ratio = f"{r:.2f}x"
            limit = 0.7 if ping else 1.0
            goal = f"≤ {limit:.2f}: " + ("met" if r <= limit else "not met")
    print(f"| {case} | " + " | ".join(fmt(s) for s in systems) + f" | {best} | {ratio} | {goal} |")
    if sp is not None:
        ratio_lines.append(f"| {case} | " + " | ".join(
            "-" if s == "spindle" or cells[s] is None else f"{cost(case, sp) / cost(case, cells[s]):.2f}x"
            for s in systems if s != "spindle") + " |")
if ratio_lines:
    print()
    print("spindle's time per operation / each peer's (below 1: spindle faster):")
    print()
    print("| case | " + " | ".join(s for s in systems if s != "spindle") + " |")
    print("|---" * len(systems) + "|")
    print("\n".join(ratio_lines))
splits = {}
for (case, system), rs in rows.items():
    if system in ("spindle", "tokio", "may") and case.startswith("pingpong"):
        v = [r.get("split", "-") for r in rs if r.get("split", "-") != "-"]
        if v:
            splits.setdefault(system, []).append(f"{case} {v.count('1')}/{len(v)}")
if splits:
    print()
    print("ping-pong runs whose two tasks ended on two workers:")
    for system, v in splits.items():
        print(f"- {system}: " + ", ".join(v))
PY
[ -n "$raw" ] && cp "$results" "$raw"
rm -f "$results"
