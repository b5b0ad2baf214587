# Sourced by the leak checks (sanitizers.sh, valgrind.sh, fuzz.sh): the OpenCL ICD loader
# (ocl-icd) loads every installed implementation's library at the first OpenCL call, used or
# not, so another implementation's leaks would fail flashcl's checks (with Debian's
# mesa-opencl-icd installed, libRusticlOpenCL's leak at exit did). The checks run on POCL, so
# the loader is pinned to POCL's ICD. A caller who set OCL_ICD_VENDORS, or who names another
# device in FLASHCL_DEVICE, keeps the loader as they set it: nothing of anyone's is suppressed.
if [ -z "${OCL_ICD_VENDORS:-}" ] && [ -z "${FLASHCL_DEVICE:-}" ] &&
  [ -f "${OPENCL_VENDOR_PATH:-/etc/OpenCL/vendors}/pocl.icd" ]; then
  export OCL_ICD_VENDORS=pocl.icd
fi
