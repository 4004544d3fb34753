#!/usr/bin/env bash
# Both API tiers of examples/axum_server.rs under wrk at once: a free key (burst 10, 5/s) and a
# paid key (burst 100, 50/s), each from its own wrk process, for DURATION seconds (10 unless
# given). Prints each key's 200s against its bound, burst + rate × t, with t the run's length
# as wrk measured it, and fails if a key got more.
#
#   scripts/wrk-tiers.sh [DURATION]        # PORT=3917 and CONNECTIONS=8 per key unless set
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10}
port=${PORT:-3917}
connections=${CONNECTIONS:-8}
command -v wrk > /dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }

cargo build --release -p tollgate-tower --example axum_server --features axum
target/release/examples/axum_server "$port" > /dev/null &
server=$!
out=$(mktemp -d)
trap 'kill $server 2> /dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do
  (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
  sleep 0.1
done

for key in free-demo paid-demo; do
  wrk -t1 -c"$connections" -d"${duration}s" -H "x-api-key: $key" -s scripts/wrk-count.lua \
    "http://127.0.0.1:$port/api" > "$out/$key" &
done
wait %2 %3

status=0
report() { # key burst rate
  local line ok refused other us bound
  line=$(grep '^count ' "$out/$1")
  ok=$(sed 's/.* ok=\([0-9]*\).*/\1/' <<< "$line")
  refused=$(sed 's/.* refused=\([0-9]*\).*/\1/' <<< "$line")
  other=$(sed 's/.* other=\([0-9]*\).*/\1/' <<< "$line")
  us=$(sed 's/.* duration_us=\([0-9]*\).*/\1/' <<< "$line")
  bound=$(( $2 + $3 * us / 1000000 ))
  printf '%-9s burst %3d, %2d/s: %4d answers 200 (bound %d + %d x %d.%02d s = %d), %d answers 429, %d other\n' \
    "$1" "$2" "$3" "$ok" "$2" "$3" $(( us / 1000000 )) $(( us % 1000000 / 10000 )) "$bound" "$refused" "$other"
  if (( ok > bound || other > 0 )); then status=1; fi
}
echo "wrk -t1 -c$connections -d${duration}s per key, both at once, against /api"
report free-demo 10 5
report paid-demo 100 50
exit $status
