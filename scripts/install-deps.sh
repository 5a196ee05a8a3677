#!/usr/bin/env bash
# Installs every system dependency of llmc/llmrt from Debian. Idempotent and quiet when
# everything is already there; run as root (or with sudo available).
set -euo pipefail

packages=(
  cmake ninja-build ccache pkg-config g++ python3
  libmlir-16-dev mlir-16-tools llvm-16-dev llvm-16-tools
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev libpcre2-dev libxxhash-dev libicu-dev
  clang-16 libclang-rt-16-dev
  libcpp-httplib-dev nlohmann-json3-dev
  curl
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
