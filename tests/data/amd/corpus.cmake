# The AMD test corpus (tests/data/amd): every HIP source compiled by clang to amdgcn device
# bitcode for gfx90a, without HIP headers or device libraries (hip_minimal.h declares what the
# kernels use). The hand-written GPUCompiler-style IR (*.ll) is read from the source tree.
#
# include()d from tests/CMakeLists.txt. Inputs:
#   KCACHE_CLANG      clang-22 (the project sets it)
# Outputs:
#   target kcache_amd_corpus (ALL)      builds ${CMAKE_CURRENT_BINARY_DIR}/amd/<stem>.gfx90a.bc
#   KCACHE_AMD_CORPUS_DIR               that folder, or empty when the corpus cannot be built
#   KCACHE_AMD_CORPUS_SKIP_REASON       why it is empty (for GTEST_SKIP), else empty
#   KCACHE_AMD_CORPUS_SOURCE_DIR        tests/data/amd, where the *.ll inputs are

set(KCACHE_AMD_CORPUS_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}")
set(KCACHE_AMD_CORPUS_DIR "")
set(KCACHE_AMD_CORPUS_SKIP_REASON "")
set(_kc_amd_out_dir "${CMAKE_CURRENT_BINARY_DIR}/amd")

# One pattern family per file; see the comment at the top of each.
set(_kc_amd_sources
  atomics_multi.hip    # several kernels in one file; shared, global, 64-bit and CAS-loop atomics
  block_reduce.hip     # templated block reductions, static __shared__, explicit instantiation
  ocml_math.hip        # sinf, expf, powf, ... through ocml; extern "C" kernels; f64 math
  shared_memory.hip    # static tile, HIP_DYNAMIC_SHARED and extern __shared__ dynamic LDS
)

if(NOT KCACHE_CLANG OR NOT EXISTS "${KCACHE_CLANG}")
  set(KCACHE_AMD_CORPUS_SKIP_REASON "clang (KCACHE_CLANG='${KCACHE_CLANG}') not found")
elseif(NOT "AMDGPU" IN_LIST LLVM_TARGETS_TO_BUILD)
  set(KCACHE_AMD_CORPUS_SKIP_REASON "LLVM was built without the AMDGPU target")
endif()

if(KCACHE_AMD_CORPUS_SKIP_REASON)
  message(STATUS "AMD corpus: not built (${KCACHE_AMD_CORPUS_SKIP_REASON})")
  add_custom_target(kcache_amd_corpus ALL)
  return()
endif()

set(KCACHE_AMD_CORPUS_DIR "${_kc_amd_out_dir}")
file(MAKE_DIRECTORY "${_kc_amd_out_dir}")

# --no-gpu-bundle-output: without it clang wants clang-offload-bundler, which is not installed.
# -nogpuinc -nogpulib: no HIP headers, no ROCm device libraries; kcache links ocml/ockl itself.
# clang ignores -MD in device-only mode, so the one shared header is listed in DEPENDS.
set(_kc_amd_clang_flags
  -x hip --offload-arch=gfx90a --offload-device-only --no-gpu-bundle-output -nogpulib -nogpuinc
  -O2 -emit-llvm -c)

set(_kc_amd_outputs "")
foreach(_source IN LISTS _kc_amd_sources)
  set(_src "${KCACHE_AMD_CORPUS_SOURCE_DIR}/${_source}")
  get_filename_component(_stem "${_source}" NAME_WE)
  set(_bc "${_kc_amd_out_dir}/${_stem}.gfx90a.bc")
  add_custom_command(
    OUTPUT "${_bc}"
    COMMAND ${KCACHE_COMPILER_LAUNCHER} "${KCACHE_CLANG}" ${_kc_amd_clang_flags} "${_src}" -o "${_bc}"
    DEPENDS "${_src}" "${KCACHE_AMD_CORPUS_SOURCE_DIR}/hip_minimal.h"
    COMMENT "AMD corpus: clang ${_source} (gfx90a)"
    VERBATIM)
  list(APPEND _kc_amd_outputs "${_bc}")
endforeach()

add_custom_target(kcache_amd_corpus ALL DEPENDS ${_kc_amd_outputs})
list(LENGTH _kc_amd_outputs _kc_amd_count)
message(STATUS "AMD corpus: ${_kc_amd_count} files in ${KCACHE_AMD_CORPUS_DIR}")

unset(_kc_amd_sources)
unset(_kc_amd_outputs)
unset(_kc_amd_count)
unset(_kc_amd_clang_flags)
unset(_kc_amd_out_dir)
