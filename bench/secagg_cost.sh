#!/usr/bin/env bash
# The cost of secure aggregation (SecAgg+) next to plain FedAvg on this machine, as a
# markdown table (docs/results.md, "Secure aggregation cost (SecAgg+)"). Builds nothing.
#   bench/secagg_cost.sh [BUILD_DIR] [-- EXTRA federation_bench secure ARGS]
# Defaults: 1M parameters (logreg on 1000x999x1 inputs, 999,001 parameters), 10, 32 and 100
# clients, 5 rounds each; per client count a plain run, SecAgg+ with keys bound to the
# clients' certificates, and SecAgg+ without, back to back (so all three see the same
# machine). The real fedcore-server process; the no-op clients share this machine with it,
# which is why server and client CPU are reported apart from wall time.
#   e.g. bench/secagg_cost.sh build/release -- --clients 10,32,100:3
set -euo pipefail
build=${1:-build/release}
shift || true
[[ ${1:-} == -- ]] && shift
args=(secure --params 1000000 --clients 10,32,100 --rounds 5 --client-threads "$(nproc)" "$@")
bench=$build/bench/federation_bench
if [[ ! -x $bench ]]; then
  echo "no $bench; build it: cmake --build $build --target federation_bench fedcore-server" >&2
  exit 1
fi
if pgrep -x ninja >/dev/null || pgrep -x fedcore-server >/dev/null; then
  echo "warning: a build or another fedcore-server is running; the numbers will be polluted" >&2
fi
echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
  "(family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p'))," \
  "$(free -g | awk '/^Mem:/ { print $2 }') GB RAM; $(date -u +%Y-%m-%d);" \
  "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "Command: $bench ${args[*]}"
echo
# Progress (one line per run, and the server's own warnings) goes to stderr.
"$bench" "${args[@]}"
