#!/usr/bin/env bash
# The runtime's core test binaries under valgrind's memcheck: the
# scheduler, butexes, the sync primitives, the channels, sleeps, shutdown
# and TCP. Any memcheck error (an invalid read or write, a use of an
# uninitialised value, an invalid free, a leak of a block nothing points
# to) fails the run, as does a failing test.
#
#   bash benches/memcheck.sh [TEST...]     (default: all eight)
#
# The binaries are built as CI's test step builds them (release, the
# workspace's features), so in CI this builds nothing. Under valgrind the
# tests run one at a time, and SPINDLE_UNDER_VALGRIND=1 makes their long
# loops shorter (runtime/tests/common: `scaled`). corosensei tells valgrind
# about every task stack (runtime/src/stack: `ValgrindStackRegistration`),
# so switching stacks is no error. No suppressions are needed.
#
# Without valgrind, the script says it skipped and succeeds, unless
# SPINDLE_REQUIRE_VALGRIND=1 (as CI sets it): then it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
  if [ "${SPINDLE_REQUIRE_VALGRIND:-0}" = 1 ]; then
    echo "memcheck: FAILED: valgrind is not installed (apt-get install valgrind)"
    exit 1
  fi
  echo "memcheck: skipped: valgrind is not installed"
  exit 0
fi

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(core butex sync mpsc oneshot sleep shutdown net_tcp)
fi
selection=()
for t in "${tests[@]}"; do
  selection+=(--test "$t")
done

# The executables from cargo's JSON messages: a test target's `name` (the
# target object holds no nested braces) and its `executable`.
binaries=$(cargo test --release --no-run --workspace "${selection[@]}" \
    --message-format=json-render-diagnostics |
  sed -n 's/.*"target":{[^}]*"kind":\["test"\][^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p')

failed=()
start=$(date +%s)
for t in "${tests[@]}"; do
  bin=$(awk -v t="$t" '$1 == t { print $2; exit }' <<<"$binaries")
  if [ -z "$bin" ]; then
    echo "memcheck: no test binary named $t"
    exit 1
  fi
  t0=$(date +%s)
  # --fair-sched: valgrind runs one thread at a time; a fair lock keeps a
  # worker spinning for work from holding it while the thread it waits
  # for is kept off. Syscall 440 (process_madvise, Linux 5.10) is unknown
  # to valgrind before 3.23: it answers ENOSYS and the runtime falls back
  # to one madvise per stack, after a warning.
  if SPINDLE_UNDER_VALGRIND=1 valgrind --tool=memcheck --error-exitcode=1 \
      --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
      --fair-sched=yes --quiet \
      "$bin" --test-threads=1 -q; then
    echo "memcheck: $t: clean ($(( $(date +%s) - t0 )) s)"
  else
    echo "memcheck: $t: FAILED ($(( $(date +%s) - t0 )) s)"
    failed+=("$t")
  fi
done

echo "memcheck: ${#tests[@]} binaries in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "memcheck: failed: ${failed[*]}"
  exit 1
fi
