#!/usr/bin/env bash
# Installs every system dependency of llmc/llmrt from Debian. Idempotent and quiet when
# everything is already there; run as root (or with sudo available).
set -euo pipefail

packages=(
  cmake ninja-build ccache pkg-config g++ python3 python3-pip curl patchelf xz-utils
  libmlir-16-dev mlir-16-tools llvm-16-dev llvm-16-tools
  libprotobuf-dev protobuf-compiler
  libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev libpcre2-dev libxxhash-dev
  clang-16 libclang-rt-16-dev
  libcpp-httplib-dev nlohmann-json3-dev
  # KV-cache events (runtime/server/kv_events.cc); Prometheus, headless Chromium and its driver
  # for the gateway tests (tests/gateway/: a real scraper, the chat page in a real browser).
  libzmq3-dev prometheus chromium chromium-driver
)
# arm64 (scripts/cross-arm64.sh): the cross toolchain, qemu to run its output, and the :arm64
# -dev packages of the runtime core (multiarch, beside the amd64 ones; protoc stays amd64).
# Installed in a second step that may fail without failing the build: multiarch needs the
# amd64 and arm64 versions of each library to match, which a partly upgraded machine may not
# allow; the arm64 ctest test then skips and prints which package is missing.
arm64_packages=(
  g++-aarch64-linux-gnu qemu-user
  libabsl-dev:arm64 libprotobuf-dev:arm64 libhwy-dev:arm64 libpcre2-dev:arm64
  libxxhash-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
)

# The OpenAI and Anthropic Python SDKs, for the server's client tests (reference clients nobody
# here wrote), jsonschema (the structured-output test validates with it) and xgrammar (its masks
# are the reference of runtime/grammar/testdata/make_xgrammar_masks.py; it pulls torch), into
# the python3 on PATH, which is the one the tests run. Debian's own python3 refuses system-wide
# pip installs (PEP 668); there the flag below says we mean it.
install_openai_sdk() {
  local sdk
  # pyzmq (import name zmq) and msgspec decode the KV-cache events as vLLM's own subscribers
  # do; selenium drives Chromium for the chat-page test; pyyaml (yaml) reads deploy/kubernetes/
  # for the manifests test (tests/gateway/); tiktoken is the reference encoder of gpt-oss's
  # o200k_harmony (tests/server/gpt_oss_tokenizer_test.py). torchao is not here: only the
  # generator compiler/quant/testdata/make_mxfp4_reference.py reads it, not a test.
  for sdk in openai anthropic jsonschema xgrammar pyzmq msgspec selenium pyyaml tiktoken; do
    local module="$sdk"
    case "$sdk" in
      pyzmq) module=zmq ;;
      pyyaml) module=yaml ;;
    esac
    python3 -c "import $module" 2>/dev/null && continue
    echo "install-deps: pip install $sdk"
    python3 -m pip install --quiet "$sdk" 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages "$sdk"
  done
}

missing_of() {
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      echo "$pkg"
    fi
  done
}
mapfile -t missing < <(missing_of "${packages[@]}")
mapfile -t missing_arm64 < <(missing_of "${arm64_packages[@]}")
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_arm64[@]} -eq 0 ]; then
  install_openai_sdk
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
added_arm64=0
if [ ${#missing_arm64[@]} -gt 0 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
  added_arm64=1
fi
if ! $sudo apt-get update -qq; then
  # A mirror without arm64 indexes must not stop the native build: drop the architecture again.
  if [ "$added_arm64" = 1 ]; then
    echo "install-deps: apt-get update failed with arm64 enabled; continuing without arm64"
    $sudo dpkg --remove-architecture arm64
    missing_arm64=()
  fi
  $sudo apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
if [ ${#missing_arm64[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing_arm64[*]}"
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing_arm64[@]}" >/dev/null; then
    echo "install-deps: the arm64 cross packages could not be installed; the arm64 test will skip"
  fi
fi
install_openai_sdk
