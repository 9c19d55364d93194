# aarch64-linux-gnu.cmake -- cross build for arm64 Linux from an x86-64 Debian
# host, with Debian's cross compiler and multiarch arm64 libraries:
#   apt-get install gcc-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libpcre2-dev:arm64 libcjson-dev:arm64 libmicrohttpd-dev:arm64 libssl-dev:arm64
#   cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DLOCKSTEP_MPI=OFF
# Tests then run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR, with the
# arm64 libc that libc6:arm64 puts in /lib/aarch64-linux-gnu), which
# ctest puts in front of every test binary; see scripts/arm64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Multiarch arm64 libc (/lib/ld-linux-aarch64.so.1, from libc6:arm64), not the
# cross sysroot: threads created with the cross libc hang under qemu-user 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
