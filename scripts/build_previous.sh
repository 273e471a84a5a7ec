#!/usr/bin/env bash
# Builds the previous version's fedcore-server and fedcore-client, for the tests that run
# this tree against them (issue 17): scripts/older_client_test.sh (a protocol-1 client
# against this server) and scripts/deb_test.sh (an upgrade over a history the previous
# server wrote, which this server migrates). Prints the directory holding both binaries.
#
# The previous version is pinned: the last commit before history schema 6 (round phases)
# and before protocol versions, so its server writes schema 5 and its client sends a HELLO
# without "protocol". The commit is checked out as a git worktree under build/previous and
# built with the release preset (ccache makes a repeat a link step); a worktree already at
# the pinned commit is reused.
#   scripts/build_previous.sh     (prints e.g. build/previous/build/release: server/fedcore-server, client/fedcore-client)
set -euo pipefail
cd "$(dirname "$0")/.."
previous=343b3fd  # schema 5, protocol 1
worktree=build/previous
if ! git cat-file -e "$previous^{commit}" 2>/dev/null; then
  echo "build_previous: commit $previous is not in this clone (a shallow clone?)" >&2
  exit 1
fi
wanted=$(git rev-parse "$previous^{commit}")
if [[ "$(git -C "$worktree" rev-parse HEAD 2>/dev/null || true)" != "$wanted" ]]; then
  git worktree remove --force "$worktree" 2>/dev/null || rm -rf "$worktree"
  git worktree prune
  git worktree add --detach "$worktree" "$previous" >/dev/null
fi
(cd "$worktree" && cmake --preset release -DFEDCORE_BUILD_TESTS=OFF -DFEDCORE_BUILD_BENCH=OFF \
  >/dev/null && cmake --build build/release --target fedcore-server fedcore-client >/dev/null)
out=$(cd "$worktree/build/release" && pwd)
for binary in server/fedcore-server client/fedcore-client; do
  [[ -x "$out/$binary" ]] || { echo "build_previous: $out/$binary was not built" >&2; exit 1; }
done
echo "$out"
