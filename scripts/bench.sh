#!/usr/bin/env bash
# Load benchmark of impulse-agent (issues 5 and 10), behind `make bench`.
#
# On loopback, in one run, side by side: the backend direct (HTTP/1.1), a
# bare quic-go HTTP/3 server (the ceiling), impulse-agent -> HTTP/1.1
# backend, impulse-agent -> HTTP/2-over-TLS backend, Caddy v2.11.9 and
# Traefik v3.6.12 (both built once and cached, scripts/caddy.sh and
# scripts/traefik.sh), Debian's Caddy as a second Caddy row, and with
# BASELINE a build of an earlier commit of the agent; HTTP/3 first, then
# HTTP/2 and HTTP/1.1 over TLS with h2load; then idle-connection memory and
# 1 GiB transfers. See test/bench/README.md.
#
# Environment:
#   QUICK=1          smoke run (about 3 minutes)
#   RUNS=N           alternating runs per target and shape (default 5)
#   DURATION=3s      measured time per run; WARMUP=1s warm-up per run
#   IDLE_N=1000      idle connections of the memory test
#   LARGE_SIZE=N     bytes per large transfer (default 1 GiB)
#   SECTIONS=...     matrix,tcp,memory,large (default all four)
#   SHAPES=...       HTTP/3 matrix payloads: small,down,up (default all three)
#   PERF=5s          also profile the agent with perf under the HTTP/3 small GET
#   PPROF=5s         also take Go CPU profiles of the agent under HTTP/2 and HTTP/1.1 small GETs (go tool pprof -top)
#   CADDY=none       skip Caddy v2.11.9; CADDY=/path/to/caddy uses that binary
#   CADDY_DEB=none   skip Debian's Caddy (installed when missing); CADDY_DEB=/path uses that binary
#   TRAEFIK=none     skip Traefik; TRAEFIK=/path/to/traefik uses that binary
#   H2LOAD=none      skip the TCP section (h2load, from nghttp2-client, installed when missing)
#   BASELINE=REF     also build the agent at git REF (e.g. HEAD~1) and compare its HTTP/3 small GETs
#   AGENT_BASE=/path use this binary as the baseline instead
#   AGENT=/path      use this impulse-agent binary instead of building ./cmd/impulse-agent
#   BENCH_ARGS=...   more flags for `bench run` (see `go run ./test/bench run -h`)
#   COMPRESS=none    skip the compression table (edge-routing issue: MB/s per
#                    coding for a 100 KB JSON response, BenchmarkCompress at
#                    the gateway's levels, after the load runs; about 10 s)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

log() { echo "bench.sh: $*" >&2; }

# Debian packages installed when missing (root and apt-get needed): caddy
# (the second Caddy row) and nghttp2-client (h2load, the TCP section).
apt_install() { # COMMAND PACKAGE WHAT
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing $2 from Debian (apt-get install $2)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "$2" >&2; then
      apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "$2" >&2 ||
        log "could not install $2; $3 skipped"
    fi
  else
    log "$1 not found and not installable here (needs root and apt-get); $3 skipped"
  fi
}
[ -z "${CADDY_DEB:-}" ] && apt_install caddy caddy "the Debian Caddy rows are"
[ -z "${H2LOAD:-}" ] && apt_install h2load nghttp2-client "the TCP section is"
if [ -z "${CADDY_DEB:-}" ]; then CADDY_DEB=$(command -v caddy || echo none); fi
if [ -z "${H2LOAD:-}" ]; then H2LOAD=$(command -v h2load || echo none); fi

# Caddy v2.11.9 and Traefik v3.6.12, built once and cached (the first
# Traefik build takes about 7 minutes on 2 cores).
if [ -z "${CADDY:-}" ]; then
  CADDY=$(scripts/caddy.sh) || { log "building caddy failed; its rows are skipped"; CADDY=none; }
fi
if [ -z "${TRAEFIK:-}" ]; then
  TRAEFIK=$(scripts/traefik.sh) || { log "building traefik failed; its rows are skipped"; TRAEFIK=none; }
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
base=${AGENT_BASE:-}
base_name=base
if [ -z "$base" ] && [ -n "${BASELINE:-}" ]; then
  rev=$(git rev-parse --verify "${BASELINE}^{commit}")
  log "building impulse-agent at $BASELINE ($(git log -1 --format='%h %s' "$rev")) as the baseline"
  mkdir "$dir/base-src"
  git archive "$rev" | tar -x -C "$dir/base-src"
  (cd "$dir/base-src" && "$GO" build -o "$dir/impulse-agent-base" ./cmd/impulse-agent)
  base=$dir/impulse-agent-base
  base_name=$(git rev-parse --short "$rev")
fi

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
[ -n "${PPROF:-}" ] && args+=(-pprof "$PPROF")
[ -n "$base" ] && args+=(-agent-base "$base" -agent-base-name "$base_name")
args+=(-caddy "$CADDY" -caddy-deb "$CADDY_DEB" -traefik "$TRAEFIK" -h2load "$H2LOAD")
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
[ -n "${BENCH_ARGS:-}" ] && args+=(${BENCH_ARGS})

start=$(date +%s)
"$dir/bench" run "${args[@]}"

if [ "${COMPRESS:-}" != none ]; then
  log "compression of a 100 KB JSON response (BenchmarkCompress, one core)"
  echo
  echo "| coding (level) | MB/s of JSON | encoded / JSON | allocs/op |"
  echo "|---|---|---|---|"
  "$GO" test -run '^$' -bench '^BenchmarkCompress$' -benchtime "${COMPRESS_TIME:-2s}" -cpu 1 -benchmem ./gateway/compress |
    awk '$1 ~ /^BenchmarkCompress\// {
      name = $1; sub(/^BenchmarkCompress\//, "", name)
      level = (name == "zstd") ? "zstd (1)" : (name == "br") ? "br (3)" : "gzip (5)"
      for (i = 2; i <= NF; i++) { if ($i == "MB/s") mbs = $(i-1); if ($i == "ratio") ratio = $(i-1); if ($i == "allocs/op") allocs = $(i-1) }
      printf "| %s | %s | %.1f%% | %s |\n", level, mbs, ratio * 100, allocs
    }'
fi
log "done in $(( $(date +%s) - start )) s"
