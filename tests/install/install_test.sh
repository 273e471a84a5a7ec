#!/usr/bin/env bash
# find_package(Fedcore) from an installed tree: installs the libraries, headers and CMake
# package of BUILD (component Fedcore_Development) into a temporary prefix, builds
# tests/install/consumer against it alone and runs it; then checks that the systemd units
# BUILD would install start the programs from their installed place.
#   install_test.sh BUILD_DIR SOURCE_DIR INSTALL_BINDIR
set -euo pipefail
build=$1 source=$2 bindir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" --component Fedcore_Development >/dev/null
test -f "$work/prefix/include/fedcore/client/daemon.hpp"
test -f "$work/prefix/include/fedcore/shared/util/error.hpp"
# Only the installed tree: the consumer sees neither the source nor the build folder.
cmake -S "$source/tests/install/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
out=$("$work/consumer/consumer")
echo "$out"
[[ $out == "fedcore consumer: mlp with 131 parameters, a "*" frame header, first wait "*" ms" ]]
for unit in fedcore-server fedcore-client; do
  grep -qx "ExecStart=$bindir/$unit --config /etc/fedcore/${unit#fedcore-}.json" \
    "$build/systemd/$unit.service"
done
echo "install_test: ok"
