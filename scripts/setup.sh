#!/usr/bin/env bash
# Installs the Debian packages Fedcore needs, by name, and only those that are missing.
# Idempotent; runs as root (CI) or through sudo. Says what it installs.
#
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --bench    also the comparison peers (PyTorch on OpenBLAS)
set -euo pipefail

core_packages=(
  g++ cmake ninja-build make pkg-config
  libboost1.81-dev libssl-dev openssl nlohmann-json3-dev libeigen3-dev libsqlite3-dev sqlite3
  googletest libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libspdlog-dev zlib1g-dev
  libopenblas0-openmp
  dataset-fashion-mnist clang-format
  libopenmpi-dev openmpi-bin
)
bench_packages=(python3 python3-torch python3-numpy libgloo-dev)

want=("${core_packages[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench_packages[@]}") ;;
    *) echo "setup.sh: unknown option '$arg' (known: --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for package in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  echo "setup: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
