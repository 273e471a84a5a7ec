#!/usr/bin/env bash
# A server of this tree against the previous version's fedcore-client binary (issue 17: "a
# server talking to a client one version older"). The previous version is pinned below:
# the last commit before protocol versions (docs/protocol.md, "Versions"), whose client
# sends a HELLO without "protocol". Builds only its fedcore-client, in a git worktree under
# build/ (ccache makes it a link step on a warm cache), then runs
# tests/python/older_client_check.py.
#   scripts/older_client_test.sh BUILD
set -euo pipefail
build=$(cd "${1:?usage: scripts/older_client_test.sh BUILD}" && pwd)
cd "$(dirname "$0")/.."
previous=8493e06  # protocol 1
worktree=build/previous-client
if ! git cat-file -e "$previous^{commit}" 2>/dev/null; then
  echo "older_client_test: commit $previous is not in this clone (a shallow clone?)" >&2
  exit 1
fi
git worktree remove --force "$worktree" 2>/dev/null || rm -rf "$worktree"
git worktree prune
git worktree add --detach "$worktree" "$previous" >/dev/null
trap 'git worktree remove --force "$worktree" >/dev/null 2>&1 || true' EXIT
(cd "$worktree" && cmake --preset release -DFEDCORE_BUILD_TESTS=OFF -DFEDCORE_BUILD_BENCH=OFF \
  >/dev/null && cmake --build build/release --target fedcore-client >/dev/null)
python=/usr/bin/python3  # Debian's, whose numpy the SDK was built for
[[ -x $python ]] || python=python3
"$python" tests/python/older_client_check.py --build "$build" \
  --older-client "$worktree/build/release/client/fedcore-client"
