#!/usr/bin/env bash
# Session upload over loopback: one ~100 MB transcript (SVC_BENCH_UPLOAD_MB) posted raw as
# agents and `svc sessions push` do, the same bytes again (hashed, answered `unchanged`), then
# gzip-encoded; MB/s of each and the server's peak RSS, which must not follow the file's size
# (bodies stream to disk). Ends with the pipeline run over the stored file.
#
#   bash host/benches/session_upload.sh            # release build
#   PROFILE=dist bash host/benches/session_upload.sh   # the shipped build, if already built
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/svc-target}"
profile=${PROFILE:-release}
mb=${SVC_BENCH_UPLOAD_MB:-100}
out_dir=$profile
[ "$profile" = dev ] && out_dir=debug
bin="${SVC_SERVER_BIN:-$CARGO_TARGET_DIR/$out_dir/svc-server}"
gen="${GEN_SESSIONS_BIN:-$CARGO_TARGET_DIR/$out_dir/gen-sessions}"
# Given both binaries (SVC_SERVER_BIN, GEN_SESSIONS_BIN), nothing is built.
if [ -z "${SVC_SERVER_BIN:-}" ] || [ -z "${GEN_SESSIONS_BIN:-}" ]; then
  cargo build -q --profile "$profile" -p svc-host --bin svc-server -p svc-telemetry --bin gen-sessions
fi
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$gen" "$dir/corpus" --mb "$mb" >/dev/null
file="$dir/corpus/session-00000.jsonl"
gzip -1 -c "$file" >"$file.gz"
SVC_LOG=warn SCHEDULER_ENABLED=false SVC_SKIP_CACHE_WARMUP=1 SVC_TELEMETRY_DEBOUNCE_MS=600000 \
  "$bin" --data-dir "$dir/data" serve --listen "127.0.0.1:$port" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/api/health" >/dev/null && break; sleep 0.1; done
token=$("$bin" --data-dir "$dir/data" tokens create --email admin@localhost 2>/dev/null)
rss() { awk '/VmHWM/ {printf "%d MiB", $2 / 1024}' "/proc/$pid/status"; }
size=$(stat -c %s "$file")
echo "session upload ($bin on loopback, 2 cores shared): $(awk "BEGIN {printf \"%.1f\", $size / 1e6}") MB file; server peak RSS before: $(rss)"

# upload LABEL FILE [curl args…]: prints seconds, MB/s of session data and the outcome.
upload() {
  local label=$1 body=$2
  shift 2
  local out
  out=$(curl -sS -w '\n%{time_total}' -X POST --data-binary @"$body" "$@" \
    -H "Authorization: Bearer $token" -H 'content-type: application/octet-stream' \
    "http://127.0.0.1:$port/api/upload/sessions?name=bench.jsonl")
  local secs outcome
  secs=$(tail -n1 <<<"$out")
  outcome=$(head -n1 <<<"$out" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("outcome", "failed"))')
  printf '  %-34s %6.2f s  %6.0f MB/s  outcome %-9s server peak RSS %s\n' "$label" "$secs" \
    "$(awk "BEGIN {print $size / 1e6 / $secs}")" "$outcome" "$(rss)"
}
upload "raw" "$file"
upload "the same bytes again" "$file"
upload "gzip ($(awk "BEGIN {printf \"%.1f\", $(stat -c %s "$file.gz") / 1e6}") MB on the wire)" "$file.gz" -H 'content-encoding: gzip'

start=$(date +%s.%N)
report=$(curl -sS -X POST -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/admin/telemetry/run")
secs=$(awk "BEGIN {print $(date +%s.%N) - $start}")
events=$(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["processed"], "file,", r["events"], "events")' <<<"$report")
printf '  %-34s %6.2f s  %6.0f MB/s  %s; server peak RSS %s\n' "pipeline run over it" "$secs" \
  "$(awk "BEGIN {print $size / 1e6 / $secs}")" "$events" "$(rss)"
