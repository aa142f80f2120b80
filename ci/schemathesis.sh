#!/usr/bin/env bash
# The REST API against its own OpenAPI document: schemathesis (PyPI) with
# every check, against a real daemon with data in it (a simulated engine and
# GPU page, canaries, an alert rule, sweeps bounded tightly by
# [server.sweep_limits] so the fuzzed sweep starts stay small). Fails on any
# schemathesis finding. Usage: ci/schemathesis.sh [path/to/llmwatch]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/llmwatch}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Waits up to 30 s for a line matching $2 in file $1 and prints it.
wait_line() {
  for _ in $(seq 300); do
    if grep -m1 -E "$2" "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}

"$bin" sim --port 0 --gpu-port 0 --profile balanced >"$work/sim.out" 2>&1 &
pids+=($!)
engine=$(wait_line "$work/sim.out" 'simulated engine' | grep -oE 'http://[0-9.]+:[0-9]+')
gpu=$(wait_line "$work/sim.out" 'dcgm-exporter page' | grep -oE 'http://[0-9.]+:[0-9]+/metrics')

cat >"$work/llmwatch.toml" <<TOML
[server]
listen = "127.0.0.1:0"
database = "$work/llmwatch.db"
alert_interval = "1s"

[server.sweep_limits]
max_steps = 2
max_requests_per_step = 4
max_step_duration = "2s"
max_sweep_duration = "10s"

[[targets]]
name = "sim"
url = "$engine"
scrape_interval = "1s"
gpus = "gpu"
[targets.probe]
interval = "1s"
shape = "16x4"

[[gpus]]
name = "gpu"
dcgm_url = "$gpu"
interval = "1s"

[[alerts]]
name = "always"
signal = "requests_waiting"
op = ">="
threshold = 0
window = "10s"
TOML

"$bin" serve --config "$work/llmwatch.toml" >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
base=$(wait_line "$work/serve.out" 'llmwatch listening on' | grep -oE 'http://[0-9.]+:[0-9]+')
# Data first: the target scraped and probed, so answers are not all empty.
for _ in $(seq 300); do
  if curl -fsS "$base/api/v1/targets/sim" 2>/dev/null | grep -q '"probe_ttft_p95":{"source":"probe","unit":"s","value":[0-9]'; then
    break
  fi
  sleep 0.1
done

schemathesis run "$base/api/v1/openapi.json" --checks all --max-examples 25 --seed 1 \
  --request-timeout 30 --no-color
