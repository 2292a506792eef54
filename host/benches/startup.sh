#!/usr/bin/env bash
# Start to ready on an existing store: the binary's size, then the milliseconds from exec to
# the first 200 from /api/health, over several starts (the first start migrates and is not
# counted). Prints figures; asserts nothing.
#
#   SVC_SERVER_BIN=target/dist/svc-server bash host/benches/startup.sh
set -euo pipefail
bin="${SVC_SERVER_BIN:?set SVC_SERVER_BIN to the svc-server to measure}"
runs=${RUNS:-7}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "svc-server: $(stat -c %s "$bin") bytes ($(numfmt --to=si "$(stat -c %s "$bin")"))"
start() {
  SVC_LOG=warn SCHEDULER_ENABLED=false SVC_SKIP_CACHE_WARMUP=1 \
    "$bin" --data-dir "$dir/data" serve --listen "127.0.0.1:$port" >/dev/null 2>&1 &
  pid=$!
  local t0=$(date +%s%N)
  until curl -sf -o /dev/null "http://127.0.0.1:$port/api/health"; do
    sleep 0.001
  done
  local t1=$(date +%s%N)
  kill $pid; wait $pid 2>/dev/null || true
  echo $(( (t1 - t0) / 1000 ))
}
start >/dev/null # creates and migrates the store
times=()
for _ in $(seq "$runs"); do times+=("$(start)"); done
printf '%s\n' "${times[@]}" | sort -n | awk -v n="$runs" '
  {v[NR]=$1} END {printf "start to ready on an existing store: median %.1f ms, min %.1f ms, max %.1f ms (%d starts)\n", v[int((n+1)/2)]/1000, v[1]/1000, v[n]/1000, n}'
