#!/usr/bin/env bash
# Installs the Debian packages the tests drive as real clients, when missing:
# ngtcp2-client (gtlsclient, a strict HTTP/3 client independent of quic-go),
# nghttp2-client (h2load, nghttp), curl, chromium (the status page's
# browser test drives /usr/bin/chromium through chromedp; a large package:
# about 40 s to install on a fresh machine) and systemd (systemd-analyze
# verifies dist/impulse-agent.service). Runs apt-get only when something
# is missing and we are root; otherwise it names what is missing and fails,
# so a test never silently skips a client.
set -euo pipefail
declare -A want=([gtlsclient]=ngtcp2-client [h2load]=nghttp2-client [curl]=curl [chromium]=chromium [systemd-analyze]=systemd)
missing=()
for bin in "${!want[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${want[$bin]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: missing Debian packages: ${missing[*]} (install them: apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
