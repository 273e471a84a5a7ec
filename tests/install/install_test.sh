#!/usr/bin/env bash
# find_package(Fedcore) from an installed tree: installs the libraries, headers and CMake
# package of BUILD (component Fedcore_Development) into a temporary prefix, builds
# tests/install/consumer against it alone and runs it; then installs the client component
# there too and checks that its systemd unit starts the program from the prefix it was
# installed to (units take their bin/ at install time; scripts/deb_test.sh checks the
# server's under /usr).
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 source=$2
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
cmake --install "$build" --prefix "$work/prefix" --component Fedcore_Client >/dev/null
test -x "$work/prefix/bin/fedcore-client"
grep -qx "ExecStart=$work/prefix/bin/fedcore-client --config /etc/fedcore/client.json" \
  "$work/prefix/lib/systemd/system/fedcore-client.service"
echo "install_test: ok"
