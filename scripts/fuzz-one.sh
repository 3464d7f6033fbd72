#!/usr/bin/env bash
# fuzz-one.sh GO PKG NAME FUZZTIME MINIMIZE PARALLEL: one fuzz target, for
# make fuzz. A run that fails with nothing but "context deadline exceeded"
# and writes no failing input is Go's fuzz coordinator racing its own
# -fuzztime deadline (golang/go#75804, fixed in Go 1.27, not in 1.26.x): it
# is run once more. Any other failure, or a failing input written, fails.
set -uo pipefail
go=$1 pkg=$2 name=$3 fuzztime=$4 minimize=$5 parallel=$6
for attempt in 1 2; do
  out=$(mktemp)
  "$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" -parallel "$parallel" "$pkg" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then rm -f "$out"; exit 0; fi
  if [ "$attempt" -eq 1 ] && grep -q '^    context deadline exceeded$' "$out" \
     && ! grep -qE 'Failing input written|panic:' "$out" \
     && [ "$(grep -c '_test.go:[0-9]' "$out")" -eq 0 ]; then
    echo "== $name: Go's -fuzztime deadline race (golang/go#75804), no failing input: once more"
    rm -f "$out"
    continue
  fi
  rm -f "$out"
  exit "$rc"
done
