#!/usr/bin/env bash
# Auth + audit overhead of a trivial authenticated endpoint: /api/me (JWT verify, user, PAT
# row and admin lookups) against /api/health (no auth, one store read), both under wrk on
# loopback in the same run, against a release build. Prints requests/s and p50/p99.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/svc-target}"
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)"; exit 1; }
cargo build -q --release -p svc-host --bin svc-server
bin="$CARGO_TARGET_DIR/release/svc-server"
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
SVC_LOG=warn "$bin" --data-dir "$dir" serve --listen "127.0.0.1:$port" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/api/health" >/dev/null && break; sleep 0.1; done
token=$("$bin" --data-dir "$dir" tokens create --email admin@localhost 2>/dev/null)
duration=${DURATION:-10s}
for path in /api/health /api/me; do
  out=$(wrk -t2 -c32 -d"$duration" --latency -H "Authorization: Bearer $token" "http://127.0.0.1:$port$path")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(grep -E "Non-2xx|Socket errors" <<<"$out" || true)
  printf '%-12s %10s req/s   p50 %8s   p99 %8s   %s\n' "$path" "$rps" "$p50" "$p99" "$errors"
done
