#!/usr/bin/env bash
# Builds Caddy v2.11.9 (the newest release on the Go module proxy when this
# was written: `go list -m -versions github.com/caddyserver/caddy/v2`) once
# with `go install` and caches it, like consul.sh (about 2 minutes on 2
# cores). Prints the binary's path. CADDY_BIN, when set and executable, wins.
set -euo pipefail
VERSION=v2.11.9
if [ -n "${CADDY_BIN:-}" ]; then
  [ -x "$CADDY_BIN" ] || { echo "caddy.sh: CADDY_BIN=$CADDY_BIN is not an executable file" >&2; exit 1; }
  echo "$CADDY_BIN"; exit 0
fi
CACHE="${IMPULSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/impulse-agent}"
BIN="$CACHE/caddy-$VERSION"
# `caddy version` says "unknown" for a `go install` build (no main-module
# version is stamped), so the module line of `caddy build-info` is checked.
# (No `| grep -q` here: with pipefail, grep closing the pipe early fails the check.)
cached() { local out; [ -x "$BIN" ] && out=$("$BIN" build-info 2>/dev/null) && [[ $out == *"caddyserver/caddy/v2"$'\t'"${VERSION}"$'\t'* ]]; }
if cached; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-caddy.lock"
flock 9
if cached; then echo "$BIN"; exit 0; fi
GOBIN=$(mktemp -d)
trap 'rm -rf "$GOBIN"' EXIT
echo "caddy.sh: building caddy $VERSION (about 2 minutes on 2 cores, once)" >&2
# Outside the repository, so its go.mod plays no part; -trimpath as a release.
(cd /tmp && GOFLAGS= GOBIN="$GOBIN" CGO_ENABLED=0 nice go install -trimpath "github.com/caddyserver/caddy/v2/cmd/caddy@$VERSION") >&2
mv "$GOBIN/caddy" "$BIN"
echo "$BIN"
