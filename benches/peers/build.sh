# Sourced by the benchmark scripts that run a Rust bench binary beside a Go
# peer program (cold_start.sh, sleep_cpu.sh, channels.sh).
#
#   log MESSAGE...
#
# says how far a run has come, on stderr (the tables go to stdout).
#
#   build_with_go_peer BIN GO_SOURCE
#
# builds target/release/BIN (into $rust_bin) and, if `go` is among
# $systems, benches/peers/GO_SOURCE into a temporary file ($go_bin); where
# `go` is not installed it says so and drops `go` from $systems.

log() { printf '%s\n' "$*" >&2; }

build_with_go_peer() {
  cargo build --release -q -p spindle-benches --bin "$1"
  rust_bin=target/release/$1
  go_bin=
  if [[ " $systems " == *" go "* ]]; then
    if command -v go >/dev/null; then
      go_bin=$(mktemp -d)/$1_go
      (cd benches/peers && go build -o "$go_bin" "$2")
    else
      log "go is not installed: Go's column is skipped"
      systems=${systems//go/}
    fi
  fi
}
