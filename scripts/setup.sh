#!/usr/bin/env bash
# Installs the Debian packages Fedcore needs, by name, and only those that are missing,
# then the dashboard's npm packages from web/package-lock.json (npm ci, only when the
# lock file changed). Idempotent; runs as root (CI) or through sudo. Says what it installs.
#
#   scripts/setup.sh            build + test dependencies
#   scripts/setup.sh --bench    also the comparison peers (PyTorch on OpenBLAS)
#   scripts/setup.sh --cpu-levels   also QEMU user mode (scripts/run_cpu_levels.sh)
#   scripts/setup.sh --fuzz     also clang, libFuzzer and clang's OpenMP (make fuzz, docs/fuzzing.md)
#   scripts/setup.sh --pip      also pip, venv and setuptools (scripts/pip_test.sh)
set -euo pipefail

core_packages=(
  g++ cmake ninja-build make pkg-config
  libboost1.81-dev libssl-dev openssl nlohmann-json3-dev libeigen3-dev libsqlite3-dev sqlite3
  googletest libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libspdlog-dev zlib1g-dev
  libisal-dev
  libopenblas0-openmp
  dataset-fashion-mnist clang-format ccache
  chromium
  libopenmpi-dev openmpi-bin
  # The Python SDK (python/): its bindings, and the NumPy, PyTorch and ONNX its tests run.
  python3 python3-dev pybind11-dev python3-numpy python3-torch python3-torchvision python3-onnx
)
bench_packages=(libgloo-dev)
cpu_level_packages=(qemu-user)
# libclang-rt-dev holds libFuzzer and the sanitizer runtimes; libomp-dev is clang's OpenMP.
fuzz_packages=(clang libclang-rt-dev libomp-dev)
# The Python SDK installed by pip into a venv, offline (python/README.md).
pip_packages=(python3-pip python3-venv python3-setuptools python3-wheel)

want=("${core_packages[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench_packages[@]}") ;;
    --cpu-levels) want+=("${cpu_level_packages[@]}") ;;
    --fuzz) want+=("${fuzz_packages[@]}") ;;
    --pip) want+=("${pip_packages[@]}") ;;
    *) echo "setup.sh: unknown option '$arg' (known: --bench, --cpu-levels, --fuzz, --pip)" >&2; exit 2 ;;
  esac
done

missing=()
for package in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if ! command -v npm >/dev/null; then
  for package in nodejs npm; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$package")
  done
fi

# The dashboard (web/): chart.js, served by fedcore-server, and playwright-core, which
# drives Chromium in the browser test. Node and npm usually come with the machine; where
# they do not, Debian's nodejs and npm packages are added to the list above.
install_web_packages() {
  local web stamp
  web="$(cd "$(dirname "$0")/.." && pwd)/web"
  stamp="$web/node_modules/.fedcore-lock"
  if ! command -v npm >/dev/null; then
    echo "setup: npm not found: the dashboard needs Node 20+ and npm for web/node_modules" >&2
    exit 1
  fi
  if [[ -f "$stamp" ]] && cmp -s "$stamp" "$web/package-lock.json"; then
    echo "setup: web/node_modules matches web/package-lock.json"
    return
  fi
  echo "setup: npm ci in web/"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$web/package-lock.json" "$stamp"
}

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages already installed"
  install_web_packages
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
install_web_packages
echo "setup: done"
