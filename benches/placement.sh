#!/usr/bin/env bash
# Predictable speed: each case of src/bin/channels.rs in several fresh
# processes, spindle with its tasks spawned from a plain thread (as users
# do) and with forced placements, beside the peers and the machine's floor,
# interleaved run by run so that the machine's drift hits every system alike.
#
#   bash benches/placement.sh            # 10 runs of every case
#   bash benches/placement.sh --quick    # 2 short runs (for CI)
#   bash benches/placement.sh --raw FILE # also keep every run's line in FILE
#
# Systems (channels.rs says exactly what each does):
#   - spindle_thread: the two tasks (consumer and producers) spawned from
#     the main thread with `Runtime::spawn`;
#   - spindle_same / spindle_split: placed with the hidden
#     `task::Builder::worker`: all on worker 0, or the first task (ponger,
#     consumer) on worker 0 and the others on worker 1;
#   - floor: two plain threads pinned to the two CPUs bounce a value through
#     one atomic, spinning: no cross-CPU hand-off is faster (ping-pongs only);
#   - tokio, may, crossbeam, std: the peers, 2 workers (threads) each.
#
# For each case and system: the median of the runs, the worst, and worst /
# median (the goal: at most 1.5). Then spindle_thread against the best
# peer (ping-pong at most 0.7 of its time, one-way at least its rate), and
# the cross-worker ping-pongs against the floor (at most 3x).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10 rts=300000 budget_ms=1000 msgs=3000000 raw=
systems="spindle_thread spindle_same spindle_split floor tokio may crossbeam std"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=2 rts=20000 budget_ms=200 msgs=300000; shift ;;
    --runs) runs=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--runs N] [--systems LIST] [--raw FILE]" >&2; exit 2 ;;
  esac
done

# shellcheck source=peers/build.sh
source benches/peers/build.sh
build_with_go_peer channels channels.go
bin=$rust_bin

cases=(
  "pingpong_butex $rts $budget_ms"
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
      "$bin" "$sys" "$case" "$n" $budget >>"$results"
    done
  done
done

python3 - "$results" "$systems" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    if kv.get("value", "-") != "-":
        rows.setdefault((kv["case"], kv["system"]), []).append(kv)
systems = sys.argv[2].split()
cases = list(dict.fromkeys(c for c, _ in rows))
def cost(case, v):
    # Time per operation: per round trip, or per message.
    return v if case.startswith("pingpong") else 1 / v
def stats(case, system):
    vals = [float(r["value"]) for r in rows.get((case, system), [])]
    if not vals:
        return None
    costs = sorted(cost(case, v) for v in vals)
    med, worst = statistics.median(costs), costs[-1]
    return med, worst, worst / med
def show(case, c):
    return c if case.startswith("pingpong") else 1 / c
unit = lambda case: "ns" if case.startswith("pingpong") else "M/s"
print("median (worst, worst/median) of each case's runs:\n")
print("| case | " + " | ".join(systems) + " |")
print("|---" * (len(systems) + 1) + "|")
for case in cases:
    cells = []
    for s in systems:
        st = stats(case, s)
        cells.append("-" if st is None else
                     f"{show(case, st[0]):,.1f} ({show(case, st[1]):,.1f}, {st[2]:.2f})")
    print(f"| {case} {unit(case)} | " + " | ".join(cells) + " |")
print("\ngoals:\n")
peers = [s for s in systems if not s.startswith("spindle") and s != "floor"]
for case in cases:
    sp = stats(case, "spindle_thread")
    ping = case.startswith("pingpong")
    for s in ("spindle_thread", "spindle_same", "spindle_split"):
        st = stats(case, s)
        if st:
            print(f"- {case} {s}: worst/median {st[2]:.2f} (≤ 1.5: {'met' if st[2] <= 1.5 else 'not met'})")
    best = [(stats(case, p)[0], p) for p in peers if stats(case, p)]
    if sp and best:
        b, p = min(best)
        r = sp[0] / b
        limit = 0.7 if ping else 1.0
        print(f"- {case} spindle_thread / best peer ({p}): {r:.2f} "
              f"(≤ {limit}: {'met' if r <= limit else 'not met'})")
    fl, sl = stats(case, "floor"), stats(case, "spindle_split")
    if ping and fl and sl:
        r = sl[0] / fl[0]
        print(f"- {case} spindle_split / floor: {r:.2f} (≤ 3: {'met' if r <= 3 else 'not met'})")
splits = {}
for (case, system), rs in rows.items():
    if case.startswith("pingpong") and system != "floor":
        v = [r.get("split", "-") for r in rs if r.get("split", "-") != "-"]
        if v:
            splits.setdefault(system, []).append(f"{case} {v.count('1')}/{len(v)}")
if splits:
    print("\nping-pong runs whose two tasks ended on two workers:")
    for system, v in splits.items():
        print(f"- {system}: " + ", ".join(v))
PY
[ -n "$raw" ] && cp "$results" "$raw"
rm -f "$results"
