#!/usr/bin/env bash
# Builds Consul v1.14.11 (the newest MPL-2.0 release whose module builds from the
# Go module proxy; see ../shared/design/consul-for-tests.md) once and caches it.
# Prints the binary's path. CONSUL_BIN, when set and executable, wins.
set -euo pipefail
VERSION=v1.14.11
if [ -n "${CONSUL_BIN:-}" ]; then
  [ -x "$CONSUL_BIN" ] || { echo "consul.sh: CONSUL_BIN=$CONSUL_BIN is not an executable file" >&2; exit 1; }
  echo "$CONSUL_BIN"; exit 0
fi
CACHE="${IMPULSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/impulse-agent}"
BIN="$CACHE/consul-$VERSION"
# (No `| grep -q` here: with pipefail, grep closing the pipe early fails the check.)
cached() { local out; [ -x "$BIN" ] && out=$("$BIN" version 2>/dev/null) && [[ $out == *"Consul ${VERSION}"* ]]; }
if cached; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
# One build at a time: parallel test packages may all ask for the binary.
exec 9>"$CACHE/.build.lock"
flock 9
if cached; then echo "$BIN"; exit 0; fi
SRC=$(cd /tmp && GOFLAGS= go mod download -json "github.com/hashicorp/consul@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$SRC" ] || { echo "consul.sh: module source not found" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
cp -r "$SRC/." "$WORK/"
chmod -R u+w "$WORK"
cd "$WORK"
go mod edit -dropreplace github.com/hashicorp/consul/api \
  -dropreplace github.com/hashicorp/consul/sdk \
  -dropreplace github.com/hashicorp/consul/proto-public
echo "consul.sh: building consul $VERSION (a few minutes, once)" >&2
GOFLAGS=-mod=mod go build -trimpath -o "$BIN.tmp" . >&2
mv "$BIN.tmp" "$BIN"
echo "$BIN"
