#!/usr/bin/env bash
# Installs the Debian 12 packages kcache builds and tests with; installs only what is missing.
# Idempotent: a second run installs nothing. The CUDA toolkit (/usr/local/cuda) is optional and
# is not installed here: the build detects it.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  llvm-22-dev clang-22 lld-22 rocm-device-libs
  libamdhip64-dev  # HIP 5.2 headers: the HIP pattern corpus (tests/data/hip)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libspdlog-dev libfmt-dev libssl-dev nettle-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-yaml systemd
  libclang-rt-22-dev openssl libcpp-httplib-dev
  libhiredis-dev redis-server gnuplot-nox libxxhash-dev
  libnghttp2-dev  # HPACK decoding: the gRPC gate reads each call's method (server/net/grpc_calls.cpp)
  ccache  # the compiler launcher (cmake/BuildSpeed.cmake)
  bubblewrap libseccomp-dev  # the jail tools run on peers' bytes run in (server/compile/jail.hpp)
  clang-tools-22  # clang-linker-wrapper: links clang CUDA programs with -fgpu-rdc (tests/data/launcher/clang.ninja)
  chromium  # the status page's test in a real browser (tests/browser)
  mmdebstrap  # a fresh Debian root to install the package into (tests/deploy/check_package.sh)
  help2man lintian  # the package's man pages (cmake/Package.cmake) and its check (check_package.sh)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
