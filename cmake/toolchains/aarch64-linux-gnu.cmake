# Cross-compiling for 64-bit Arm Linux with Debian's toolchain (g++-aarch64-linux-gnu) against
# multiarch arm64 libraries (dpkg --add-architecture arm64; libabsl-dev:arm64 ...), which live
# in /usr/lib/aarch64-linux-gnu beside the amd64 ones: no sysroot, CMake finds them through
# CMAKE_LIBRARY_ARCHITECTURE. Programs (protoc) stay the build machine's. Tests run under
# qemu-aarch64 (qemu-user) with the loader and libc of libc6:arm64 (/lib/ld-linux-aarch64.so.1,
# /lib/aarch64-linux-gnu), see LLMRT_QEMU_AARCH64 below.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Highway targets NEON only: runtime/backend/cpu/kernels.cc does not compile for SVE (g++ 12:
# "array elements cannot have SVE type", an array of sizeless vectors at kernels.cc:346).
# 0xF000000 = HWY_SVE2_128 | HWY_SVE_256 | HWY_SVE2 | HWY_SVE (hwy/detect_targets.h, 1.0.3).
# No -march: the library stays Armv8.0-A so it runs on every 64-bit Arm core (a Cortex-A53 phone);
# the sdot / smmla kernels are functions compiled for those extensions and chosen at run time
# (runtime/backend/cpu/cpu_features.h, dispatch.h).
set(CMAKE_C_FLAGS_INIT "-DHWY_DISABLED_TARGETS=0xF000000")
set(CMAKE_CXX_FLAGS_INIT "-DHWY_DISABLED_TARGETS=0xF000000")

# Only arm64 libraries and packages; the host's protoc.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")

find_program(LLMRT_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(LLMRT_QEMU_AARCH64)
  # -L /, not -L /usr/aarch64-linux-gnu: with the cross prefix, qemu takes the loader from
  # libc6-arm64-cross (2.36-8cross1) while the loader, reading the host's ld.so.cache, takes
  # libc.so.6 from libc6:arm64 (2.36-9+deb12u14). The two share the GLIBC_PRIVATE _rtld_global
  # (4,512 vs 4,520 bytes): pthread_create then walks its stack cache list at the wrong offset
  # and spins forever, so every multi-thread test hung. One package's loader and libc agree.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LLMRT_QEMU_AARCH64} -L /)
endif()
