#!/usr/bin/env bash
# A server of this tree against the previous version's fedcore-client binary (issue 17: "a
# server talking to a client one version older"). The previous version is the one
# scripts/build_previous.sh pins: before protocol versions (docs/protocol.md, "Versions"),
# its client sends a HELLO without "protocol". Runs tests/python/older_client_check.py.
#   scripts/older_client_test.sh BUILD
set -euo pipefail
build=$(cd "${1:?usage: scripts/older_client_test.sh BUILD}" && pwd)
cd "$(dirname "$0")/.."
previous=$(scripts/build_previous.sh)
python=/usr/bin/python3  # Debian's, whose numpy the SDK was built for
[[ -x $python ]] || python=python3
"$python" tests/python/older_client_check.py --build "$build" \
  --older-client "$previous/client/fedcore-client"
