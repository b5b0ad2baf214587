#!/bin/sh
# Installs what flashcl needs on Debian/Ubuntu: a C compiler, CMake, the OpenCL loader and
# headers, POCL (OpenCL on the CPU, for machines without a GPU driver), CMocka, and clang-15
# with rocm-device-libs for the tests' offline compile check of the AMD GPU kernels,
# pkg-config for the packaging test, cppcheck and clang-tidy for the static analysis test,
# valgrind for the memory check, oclgrind (an OpenCL simulator that reports out-of-bounds
# accesses and data races) for the kernel check, and mesa-opencl-icd (Mesa's rusticl, a second
# OpenCL implementation on the CPU, llvmpipe) for the tests run there as well, numpy,
# pytest and PyOpenCL for the Python package's tests, and MPICH for flashcl_mpi (attention
# across MPI ranks) and its tests under mpiexec.
# Does nothing when everything is already there.
set -e
packages="gcc libc6-dev make cmake ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libcmocka-dev
clang-15 rocm-device-libs pkg-config cppcheck clang-tidy valgrind oclgrind mesa-opencl-icd
python3-numpy python3-pytest python3-pyopencl libmpich-dev mpich"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing:$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
