#!/usr/bin/env bash
# Builds Jaeger v1.76.0's all-in-one binary (cmd/jaeger: the OpenTelemetry
# Collector based "v2" binary with an OTLP receiver, memory storage and the
# query API) once and caches it, like consul.sh. The tracing tests send spans
# to it. Its go.mod has replace directives, so `go install pkg@version` refuses
# it: it is built as a tool of a throwaway module (never of ours). Several
# minutes on 2 cores, once. Prints the binary's path. JAEGER_BIN, when set and
# executable, wins.
set -euo pipefail
VERSION=v1.76.0
if [ -n "${JAEGER_BIN:-}" ]; then
  [ -x "$JAEGER_BIN" ] || { echo "jaeger.sh: JAEGER_BIN=$JAEGER_BIN is not an executable file" >&2; exit 1; }
  echo "$JAEGER_BIN"; exit 0
fi
CACHE="${IMPULSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/impulse-agent}"
BIN="$CACHE/jaeger-$VERSION"
# The build info names the module and its version (`jaeger version` says
# nothing useful for a build without the release's -ldflags).
# (No `| grep -q` here: with pipefail, grep closing the pipe early fails the check.)
cached() { local out; [ -x "$BIN" ] && out=$(go version -m "$BIN" 2>/dev/null) && [[ $out == *"github.com/jaegertracing/jaeger"$'\t'"${VERSION}"* ]]; }
if cached; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-jaeger.lock"
flock 9
if cached; then echo "$BIN"; exit 0; fi
WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
echo "jaeger.sh: building jaeger $VERSION (several minutes on 2 cores, once)" >&2
(
  cd "$WORK"
  export GOFLAGS= CGO_ENABLED=0
  go mod init jaegerbuild >/dev/null 2>&1
  go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$VERSION"
  nice go build -trimpath -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
) >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
