# Sourced by scripts/cross-arm64.sh and scripts/core-size.sh. arm64_prerequisites NAME sets
# $qemu, or exits 77 (ctest's skip) with "NAME: SKIP: <what is missing>" when the aarch64
# toolchain, qemu, the arm64 loader or an :arm64 library the runtime core builds against is
# absent (scripts/install-deps.sh installs them all, in a step that may fail on its own).
arm64_prerequisites() {
  local name=$1 library
  command -v aarch64-linux-gnu-g++ >/dev/null ||
    arm64_skip "$name" "no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu; scripts/install-deps.sh)"
  qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
  [ -n "$qemu" ] || arm64_skip "$name" "no qemu-aarch64 (apt-get install qemu-user)"
  [ -e /lib/ld-linux-aarch64.so.1 ] ||
    arm64_skip "$name" "no arm64 loader /lib/ld-linux-aarch64.so.1 (libc6:arm64; scripts/install-deps.sh)"
  for library in libabsl_status.so libprotobuf-lite.so libhwy.so libpcre2-8.so libxxhash.so \
    libgtest.a libgmock.a; do
    [ -e /usr/lib/aarch64-linux-gnu/$library ] ||
      arm64_skip "$name" "no arm64 $library (dpkg --add-architecture arm64; scripts/install-deps.sh)"
  done
}

arm64_skip() {
  echo "$1: SKIP: $2"
  exit 77
}
