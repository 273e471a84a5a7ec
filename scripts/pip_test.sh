#!/usr/bin/env bash
# The Python SDK installed the way python/README.md tells a user to: pip, offline, no build
# isolation, into a venv that sees Debian's NumPy. Then the SDK's NumPy federation test runs
# with its sites importing fedcore from that venv (against BUILD's fedcore-server), and the
# venv's fedcore is checked to be the installed one. The longer CI tier runs it (.ci/run-long):
# pip builds the extension with the project's CMake, about 5 minutes on a cold cache.
#   scripts/pip_test.sh BUILD       (needs scripts/setup.sh --pip)
set -euo pipefail
build=$(cd "${1:?usage: scripts/pip_test.sh BUILD}" && pwd)
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/fedcore-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-index --no-deps "$source_dir/python"
installed=$(cd / && env -u PYTHONPATH "$work/venv/bin/python" -c 'import fedcore; print(fedcore.__file__)')
[[ "$installed" == "$work/venv/"* ]] || {
  echo "pip_test: fedcore imports from $installed, not the venv" >&2; exit 1; }
cd "$source_dir/tests/python"
env -u PYTHONPATH FEDCORE_SDK_INSTALLED=1 FEDCORE_SOURCE_DIR="$source_dir" FEDCORE_BUILD_DIR="$build" \
  PYTHONPATH="$source_dir/tests/python" "$work/venv/bin/python" -m unittest \
  test_numpy_federation.NumpySitesTest.test_numpy_sites_train_a_model_the_server_only_aggregates
echo "pip_test: ok (pip-installed fedcore from $installed ran a federation)"
