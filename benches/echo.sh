#!/usr/bin/env bash
# The `echo` benchmark: a TCP echo server over loopback per system (spindle,
# tokio, may, a thread per connection, and Go where installed), each driven
# by the same closed-loop client (src/bin/echo_client.rs, one thread, mio).
#
#   bash benches/echo.sh            # 3 runs of 5 s (after 1 s of warm-up) per
#                                   # cell; conns 1, 64, 1000 x 64 B, 4 KiB
#   bash benches/echo.sh --quick    # 1 run of 1 s, conns 1 and 64 (for CI;
#                                   # the idle measurement is the same)
#   bash benches/echo.sh --per-core # each server on one CPU with one worker,
#                                   # the client alone on another
#
# Other flags: --runs N, --secs S, --warmup S, --conns "1 64 1000",
# --sizes "64 4096", --systems "spindle tokio may threads go" (and
# spindle-1w, spindle with one worker), --idle N
# (idle connections for the memory measurement; 0 skips it), --cpus "A B"
# (the server's and the client's CPU with --per-core; default "0 1"),
# --csv FILE (append every run's figures to FILE, one per line, as
# `source,case,system,metric,value,run`: what benches/report.sh plots).
#
# Each server runs with 2 worker threads (GOMAXPROCS=2 for Go, ECHO_WORKERS
# for the Rust runtimes) on a port of its own, the client and the server on
# any CPU. With --per-core each server has one worker (GOMAXPROCS=1; the
# thread-per-connection server all its threads) pinned with `taskset` to one
# CPU, and the client is pinned to another: a server's figures are then
# what one core of it does, not a share of CPUs it contends for with the
# client. Each run starts every server afresh, the systems taking turns run
# by run so that the machine's drift hits them alike; every cell is the
# median of its runs, metric by metric. The tables go to stdout, progress
# to stderr:
#
#   - requests/s and p50/p99 round-trip latency, with each system's rps over
#     the best peer's (the highest of the systems other than spindle) and its
#     p99 over the best peer p99 (the lowest); then spindle against the
#     issue's goals at 64 and 1 000 connections: >= 1.2x the best peer's
#     rps, p99 no worse than the best peer's;
#   - idle memory: a fresh server's VmRSS before and after the client opens
#     N connections and makes one 1-byte round trip on each (so each has
#     been accepted and served), divided by N: the resident cost of an idle
#     connection, task or thread stack and buffer included (goal <= 8 KiB).
#
# The client and the server share the host's cores: on a 2-core machine the
# numbers are a comparison between systems, not what any of them could do
# alone. spindle is skipped if its server does not build, Go if `go` is not
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3 secs=5 warmup=1 conns_list="1 64 1000" sizes="64 4096" idle=10000
systems="spindle spindle-1w tokio may threads go" systems_given=""
per_core="" cpus="0 1" csv=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=1 secs=1 warmup=0.2 conns_list="1 64"; shift ;;
    --per-core) per_core=1; shift ;;
    --cpus) cpus=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --conns) conns_list=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --systems) systems=$2; systems_given=1; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    *) echo "usage: $0 [--quick] [--per-core] [--cpus \"A B\"] [--runs N] [--secs S] [--warmup S] [--conns LIST] [--sizes LIST] [--systems LIST] [--idle N] [--csv FILE]" >&2
       exit 2 ;;
  esac
done

# workers: each server's worker threads (GOMAXPROCS for Go); server_cpu and
# client_cpu: `taskset` prefixes (empty: any CPU).
workers=2 server_cpu=() client_cpu=() source=echo
if [ -n "$per_core" ]; then
  read -r a b <<<"$cpus"
  workers=1 server_cpu=(taskset -c "$a") client_cpu=(taskset -c "$b") source=echo_per_core
  # With one worker each, spindle-1w is spindle.
  [ -z "$systems_given" ] && systems="spindle tokio may threads go"
fi

log() { printf '%s\n' "$*" >&2; }

# A thousand connections need more open files than the usual soft limit of
# 1024, ten thousand idle ones more again: servers inherit this, the client
# raises its own.
ulimit -n "$(ulimit -Hn)"

target=${CARGO_TARGET_DIR:-target}
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
bin="$target/release"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------- build
log "building the client and the Rust peers (release)"
if ! cargo build --release -p spindle-benches --bin echo_client --bin echo_tokio \
  --bin echo_may --bin echo_threads 2>"$work/build.log"; then
  cat "$work/build.log" >&2
  exit 1
fi
available=""
for sys in $systems; do
  case "$sys" in
    spindle)
      if cargo build --release -p spindle-benches --bin echo_spindle \
        2>"$work/spindle-build.log"; then
        available+=" spindle"
      else
        log "skipping spindle: echo_spindle does not build (last lines below)"
        tail -n 5 "$work/spindle-build.log" >&2
      fi ;;
    go)
      if ! command -v go >/dev/null; then
        log "skipping go: no go toolchain (apt install golang-go)"
      elif GOCACHE=${GOCACHE:-$target/go-build} \
        go build -o "$bin/echo_server_go" benches/peers/echo_server.go; then
        available+=" go"
      else
        log "skipping go: benches/peers/echo_server.go does not build"
      fi ;;
    spindle-1w)
      # spindle with one worker: on two vCPUs shared with the client, two
      # workers are time-sliced against it, and a started task cannot move
      # to the other worker while its own is off the CPU (docs/io.md).
      if cargo build --release -p spindle-benches --bin echo_spindle \
        2>"$work/spindle-build.log"; then
        available+=" spindle-1w"
      fi ;;
    tokio|may|threads) available+=" $sys" ;;
    *) log "unknown system $sys"; exit 2 ;;
  esac
done

# ---------------------------------------------------------------- servers
server_pid="" server_addr=""

# start_server SYSTEM: starts its server on a free port, sets server_pid and
# server_addr once it has printed "listening ADDR".
start_server() {
  local sys=$1 out="$work/$1.out"
  case "$sys" in
    go) GOMAXPROCS=$workers "${server_cpu[@]}" "$bin/echo_server_go" --addr 127.0.0.1:0 >"$out" 2>&1 & ;;
    spindle-1w)
      ECHO_WORKERS=1 "${server_cpu[@]}" "$bin/echo_spindle" --addr 127.0.0.1:0 >"$out" 2>&1 & ;;
    *) ECHO_WORKERS=$workers "${server_cpu[@]}" "$bin/echo_$sys" --addr 127.0.0.1:0 >"$out" 2>&1 & ;;
  esac
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 100); do
    server_addr=$(awk '/^listening /{print $2; exit}' "$out")
    [ -n "$server_addr" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  log "$sys server did not start:"; cat "$out" >&2
  return 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}

# field NAME LINE: the value of NAME=... in a client's result line.
field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k {print $2}'; }

# median: the middle of the numbers on stdin (the lower middle of an even count).
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "NA"}'; }

rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }

# ---------------------------------------------------------------- load
# Run by run, each system's server fresh for each run, so that the machine's
# drift over the whole measurement hits every system alike.
lines="$work/lines.tsv"       # system conns size client-line
results="$work/results.tsv"   # system conns size rps p50 p99 errors
for run in $(seq "$runs"); do
  for sys in $available; do
    start_server "$sys" || continue
    log "run $run of $runs: $sys listening on $server_addr"
    for conns in $conns_list; do
      for size in $sizes; do
        line=$("${client_cpu[@]}" "$bin/echo_client" --addr "$server_addr" --conns "$conns" --size "$size" \
          --secs "$secs" --warmup "$warmup" | tail -n 1) || true
        log "  $sys run $run: ${line:-client failed}"
        [ -n "$line" ] && printf '%s\t%s\t%s\t%s\n' "$sys" "$conns" "$size" "$line" >>"$lines"
        if [ -n "$csv" ] && [ -n "$line" ]; then
          for k in rps p50_us p99_us; do
            printf '%s,%sx%s,%s,%s,%s,%s\n' "$source" "$conns" "$size" "$sys" "$k" "$(field "$k" "$line")" "$run" >>"$csv"
          done
        fi
      done
    done
    stop_server
  done
done
for sys in $available; do
  for conns in $conns_list; do
    for size in $sizes; do
      awk -F'\t' -v s="$sys" -v c="$conns" -v z="$size" '$1 == s && $2 == c && $3 == z {print $4}' \
        "$lines" 2>/dev/null >"$work/runs" || true
      [ -s "$work/runs" ] || continue
      cell=""
      for k in rps p50_us p99_us; do
        cell+=$'\t'$(while read -r l; do field "$k" "$l"; done <"$work/runs" | median)
      done
      cell+=$'\t'$(while read -r l; do field errors "$l"; done <"$work/runs" | awk '{s += $1} END {print s + 0}')
      printf '%s\t%s\t%s%s\n' "$sys" "$conns" "$size" "$cell" >>"$results"
    done
  done
done

# ---------------------------------------------------------------- idle memory
memory="$work/memory.tsv"   # system before_kib after_kib
if [ "$idle" -gt 0 ]; then
  for sys in $available; do
    start_server "$sys" || continue
    sleep 0.5
    before=$(rss_kib "$server_pid")
    "${client_cpu[@]}" "$bin/echo_client" --addr "$server_addr" --idle "$idle" --hold 600 >"$work/idle.out" 2>&1 &
    client=$!
    pids+=("$client")
    for _ in $(seq 1200); do
      grep -q '^ready' "$work/idle.out" && break
      kill -0 "$client" 2>/dev/null || break
      sleep 0.1
    done
    if grep -q '^ready' "$work/idle.out"; then
      sleep 1   # let the server settle (tasks parked, buffers in place)
      after=$(rss_kib "$server_pid")
      printf '%s\t%s\t%s\n' "$sys" "$before" "$after" >>"$memory"
      [ -n "$csv" ] && printf '%s,idle_%s,%s,bytes_per_conn,%s,1\n' "$source" "$idle" "$sys" \
        "$(( (after - before) * 1024 / idle ))" >>"$csv"
      log "$sys: VmRSS ${before} KiB, ${after} KiB with $idle idle connections"
    else
      log "$sys: idle client failed:"; cat "$work/idle.out" >&2
    fi
    kill "$client" 2>/dev/null || true
    wait "$client" 2>/dev/null || true
    stop_server
  done
fi

# ---------------------------------------------------------------- report
echo
if [ -n "$per_core" ]; then
  echo "## echo, per core: $runs run(s) of ${secs} s per cell (median), each server on CPU ${cpus% *} with 1 worker, the client on CPU ${cpus#* }"
else
  echo "## echo: $runs run(s) of ${secs} s per cell (median), $(nproc) CPUs shared by client and server"
fi
echo
echo "| system | conns | size (B) | requests/s | p50 (µs) | p99 (µs) | rps ÷ best peer | p99 ÷ best peer p99 | errors |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
# Rows grouped by cell (conns, then size), systems in the order they ran.
[ -s "$results" ] && sort -t$'\t' -s -k2,2n -k3,3n "$results" | awk -F'\t' '
  { row[NR] = $0; sys[NR] = $1; key[NR] = $2 " " $3; ok[NR] = $4 != "NA"
    rps[NR] = $4 + 0; p99[NR] = $6 + 0
    if ($1 !~ /^spindle/ && ok[NR]) {
      if (!(key[NR] in best) || rps[NR] > best[key[NR]]) best[key[NR]] = rps[NR]
      if (!(key[NR] in low) || p99[NR] < low[key[NR]]) low[key[NR]] = p99[NR]
    } }
  function ratio(i, a, b) { return (!ok[i] || b == 0) ? "–" : sprintf("%.2f", a / b) }
  END {
    for (i = 1; i <= NR; i++) {
      split(row[i], f, "\t")
      k = key[i]
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6],
        ratio(i, rps[i], best[k]), ratio(i, p99[i], low[k]), f[7]
      if ((sys[i] == "spindle" || sys[i] == "spindle-1w") && (f[2] == 64 || f[2] == 1000) && ok[i] && best[k] > 0 && low[k] > 0) {
        met = rps[i] >= 1.2 * best[k] && p99[i] <= low[k]
        goals = goals sprintf("- %s, %s conns, %s B: %.2fx the best peer rps (goal >= 1.2x), p99 %.2fx the best peer p99 (goal <= 1): %s\n",
          f[1], f[2], f[3], rps[i] / best[k], p99[i] / low[k], met ? "met" : "MISSED")
      }
    }
    if (goals != "") printf "\nspindle against the goals:\n\n%s", goals
  }'

if [ -s "$memory" ]; then
  echo
  echo "## idle memory: $idle connections, each served once"
  echo
  echo "| system | VmRSS before (KiB) | VmRSS with $idle idle (KiB) | bytes per connection |"
  echo "|---|--:|--:|--:|"
  awk -F'\t' -v n="$idle" '{printf "| %s | %d | %d | %.0f |\n", $1, $2, $3, ($3 - $2) * 1024 / n}' "$memory"
  echo
  echo "(goal for spindle: <= 8192 bytes per connection, task stack included)"
fi
