#!/usr/bin/env bash
# bench/link_limited.sh RATE COMMAND...
#
# Runs COMMAND in a network namespace of its own whose loopback is rate-limited to RATE
# (tc's token bucket, e.g. 1gbit or 100mbit), so that a benchmark whose server and sites
# talk over 127.0.0.1 sees one shared link of that speed instead of memory-speed loopback.
# Used for the compression figures at a real link speed (docs/results.md, "Update
# compression"). Needs root (ip netns, tc); the namespace is deleted on exit.
#
#   bench/link_limited.sh 1gbit build/release/bench/federation_bench rounds 10000000 \
#       --clients 8 --rounds 3 --compression none,int8,int8+f16,topk
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 RATE COMMAND..." >&2
  exit 2
fi
rate=$1
shift
ns="fedcore-link-$$"
ip netns add "$ns"
trap 'ip netns delete "$ns"' EXIT
ip netns exec "$ns" ip link set lo up
# burst: a few TLS records' worth; latency: how long a packet may queue before it is dropped.
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 2mb latency 100ms
ip netns exec "$ns" "$@"
