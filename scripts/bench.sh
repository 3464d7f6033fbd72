#!/usr/bin/env bash
# Load benchmark of impulse-agent (issue 5), behind `make bench`.
#
# On loopback, in one run, side by side: the backend direct (HTTP/1.1), a
# bare quic-go HTTP/3 server (the ceiling), impulse-agent -> HTTP/1.1
# backend, impulse-agent -> HTTP/2-over-TLS backend, and Caddy (Debian
# package) as an HTTP/3 reverse proxy; then idle-connection memory and
# 1 GiB transfers. See test/bench/README.md.
#
# Environment:
#   QUICK=1          smoke run (about 2 minutes)
#   RUNS=N           alternating runs per target and shape (default 5)
#   DURATION=3s      measured time per run; WARMUP=1s warm-up per run
#   IDLE_N=1000      idle connections of the memory test
#   LARGE_SIZE=N     bytes per large transfer (default 1 GiB)
#   SECTIONS=...     matrix,memory,large (default all three)
#   SHAPES=...       matrix payloads: small,down,up (default all three)
#   PERF=5s          also profile the agent with perf under the small GET
#   CADDY=none       skip Caddy; CADDY=/path/to/caddy uses that binary
#   AGENT=/path      use this impulse-agent binary instead of building ./cmd/impulse-agent
#   BENCH_ARGS=...   more flags for `bench run` (see `go run ./test/bench run -h`)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

log() { echo "bench.sh: $*" >&2; }

# Caddy from Debian, installed when missing (root and apt-get needed).
if [ "${CADDY:-}" != none ] && [ -z "${CADDY:-}" ] && ! command -v caddy >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing caddy from Debian (apt-get install caddy)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends caddy >&2; then
      apt-get update -q >&2 && apt-get install -y -q --no-install-recommends caddy >&2 ||
        log "could not install caddy; its rows are skipped"
    fi
  else
    log "caddy not found and not installable here (needs root and apt-get); its rows are skipped"
  fi
fi

# quic-go wants ~7.5 MB UDP socket buffers; below that it prints "failed to
# sufficiently increase receive buffer size". Raise the limits for the run
# when they are writable, and put the old values back at exit.
restore=()
for k in rmem_max wmem_max; do
  f=/proc/sys/net/core/$k
  cur=$(cat "$f" 2>/dev/null || echo 0)
  if [ "$cur" -lt 7500000 ]; then
    if [ -w "$f" ] && sysctl -q -w "net.core.$k=7500000" 2>/dev/null; then
      log "net.core.$k raised from $cur to 7500000 for the run"
      restore+=("net.core.$k=$cur")
    else
      log "net.core.$k is $cur and not writable: quic-go may warn about UDP buffers (sysctl -w net.core.$k=7500000)"
    fi
  fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/impulse-bench-bin.XXXXXX")
cleanup() {
  rm -rf "$dir"
  if [ ${#restore[@]} -gt 0 ]; then sysctl -q -w "${restore[@]}" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

agent=${AGENT:-$dir/impulse-agent}
if [ -z "${AGENT:-}" ]; then
  log "building impulse-agent"
  "$GO" build -o "$agent" ./cmd/impulse-agent
fi
log "building the bench tool"
"$GO" build -o "$dir/bench" ./test/bench

args=(-agent "$agent")
[ -n "${QUICK:-}" ] && args+=(-quick)
[ -n "${RUNS:-}" ] && args+=(-runs "$RUNS")
[ -n "${DURATION:-}" ] && args+=(-d "$DURATION")
[ -n "${WARMUP:-}" ] && args+=(-warmup "$WARMUP")
[ -n "${IDLE_N:-}" ] && args+=(-idle-n "$IDLE_N")
[ -n "${LARGE_SIZE:-}" ] && args+=(-large-size "$LARGE_SIZE")
[ -n "${SECTIONS:-}" ] && args+=(-sections "$SECTIONS")
[ -n "${SHAPES:-}" ] && args+=(-shapes "$SHAPES")
[ -n "${PERF:-}" ] && args+=(-perf "$PERF")
[ -n "${CADDY:-}" ] && args+=(-caddy "$CADDY")
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
[ -n "${BENCH_ARGS:-}" ] && args+=(${BENCH_ARGS})

start=$(date +%s)
"$dir/bench" run "${args[@]}"
log "done in $(( $(date +%s) - start )) s"
