#!/usr/bin/env bash
# Builds Traefik v3.6.12 once from its Go module source and caches it, like
# consul.sh (about 7 minutes on 2 cores). Prints the binary's path.
# TRAEFIK_BIN, when set and executable, wins.
#
# The module zip carries webui/static with only a placeholder file (the web UI
# is built with Node in Traefik's own release process), so `//go:embed static`
# compiles and the binary simply has no dashboard assets; the benchmark does
# not use the dashboard.
set -euo pipefail
VERSION=v3.6.12
if [ -n "${TRAEFIK_BIN:-}" ]; then
  [ -x "$TRAEFIK_BIN" ] || { echo "traefik.sh: TRAEFIK_BIN=$TRAEFIK_BIN is not an executable file" >&2; exit 1; }
  echo "$TRAEFIK_BIN"; exit 0
fi
CACHE="${IMPULSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/impulse-agent}"
BIN="$CACHE/traefik-$VERSION"
# (No `| grep -q` here: with pipefail, grep closing the pipe early fails the check.)
cached() { local out; [ -x "$BIN" ] && out=$("$BIN" version 2>/dev/null) && [[ $out == *"${VERSION#v}"* ]]; }
if cached; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-traefik.lock"
flock 9
if cached; then echo "$BIN"; exit 0; fi
SRC=$(cd /tmp && GOFLAGS= go mod download -json "github.com/traefik/traefik/v3@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$SRC" ] || { echo "traefik.sh: module source not found" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
cp -r "$SRC/." "$WORK/"
chmod -R u+w "$WORK"
cd "$WORK"
# The dashboard is not built here (it needs Node); an empty static directory
# would fail `//go:embed static`, so keep a placeholder in it.
mkdir -p webui/static
[ -n "$(ls -A webui/static)" ] || echo "dashboard not built" > webui/static/README.txt
echo "traefik.sh: building traefik $VERSION (about 7 minutes on 2 cores, once)" >&2
# The version is stamped as Traefik's own release build does (pkg/version).
GOFLAGS=-mod=mod CGO_ENABLED=0 nice go build -trimpath \
  -ldflags "-X github.com/traefik/traefik/v3/pkg/version.Version=${VERSION#v}" \
  -o "$BIN.tmp" ./cmd/traefik >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
