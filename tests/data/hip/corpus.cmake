# The HIP pattern corpus (tests/data/hip): every source of corpus.tsv compiled by clang-22 against
# Debian's HIP 5.2.3 headers (libamdhip64-dev) to amdgcn device bitcode, once for each arch that
# KCACHE_CORPUS_ARCHS picks of those it lists (kcache_corpus_archs: one wave64 and one wave32 arch
# per file, taking turns, or all), as real HIP builds compile one device pass per --offload-arch.
#
# include()d from tests/CMakeLists.txt. Inputs: KCACHE_CLANG, KCACHE_COMPILER_LAUNCHER.
# Outputs:
#   target kcache_hip_corpus (ALL)   builds ${CMAKE_CURRENT_BINARY_DIR}/hip/<stem>.<arch>.bc
#   KCACHE_HIP_CORPUS_DIR            that folder, or empty when the corpus cannot be built
#   KCACHE_HIP_CORPUS_SKIP_REASON    why it is empty (for GTEST_SKIP), else empty
#   KCACHE_HIP_CORPUS_TSV            the list as built (tab-separated: file archs kernels notes),
#                                    written beside the files: the archs built

set(KCACHE_HIP_CORPUS_TSV "${CMAKE_CURRENT_LIST_DIR}/corpus.tsv")
set(_kc_hip_list "${KCACHE_HIP_CORPUS_TSV}")
set(KCACHE_HIP_CORPUS_DIR "")
set(KCACHE_HIP_CORPUS_SKIP_REASON "")
set(_kc_hip_src_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_kc_hip_out_dir "${CMAKE_CURRENT_BINARY_DIR}/hip")

if(NOT KCACHE_CLANG OR NOT EXISTS "${KCACHE_CLANG}")
  set(KCACHE_HIP_CORPUS_SKIP_REASON "clang (KCACHE_CLANG='${KCACHE_CLANG}') not found")
elseif(NOT "AMDGPU" IN_LIST LLVM_TARGETS_TO_BUILD)
  set(KCACHE_HIP_CORPUS_SKIP_REASON "LLVM was built without the AMDGPU target")
elseif(NOT EXISTS "/usr/include/hip/hip_runtime.h")
  set(KCACHE_HIP_CORPUS_SKIP_REASON "HIP headers not found (/usr/include/hip: Debian's libamdhip64-dev)")
endif()
if(KCACHE_HIP_CORPUS_SKIP_REASON)
  message(STATUS "HIP corpus: not built (${KCACHE_HIP_CORPUS_SKIP_REASON})")
  add_custom_target(kcache_hip_corpus ALL)
  return()
endif()
set(KCACHE_HIP_CORPUS_DIR "${_kc_hip_out_dir}")
file(MAKE_DIRECTORY "${_kc_hip_out_dir}")

# The flags README.md explains: device-only bitcode, no device libraries (kcache and the bare
# toolchain link them), code object 5 (what rocm-device-libs 5.2.3 has), and the prelude that
# Debian's 5.2.3 headers need under clang-22.
set(_kc_hip_flags -x hip --offload-device-only --no-gpu-bundle-output -nogpulib -O2 -emit-llvm -c
    -mcode-object-version=5 -include "${_kc_hip_src_dir}/hip_prelude.h")

kcache_corpus_lines("${_kc_hip_list}" _kc_hip_lines)
set(KCACHE_HIP_CORPUS_TSV "${_kc_hip_out_dir}/corpus.tsv")
set(_kc_hip_built "file\tarchs\tkernels\tnotes\n")
# Bitcode that tests read by name (hip_parity_test.cpp: retargeting to another gfx, the device
# libraries), built whatever the sample picks; like every built file, in the parity test too.
set(_kc_hip_named warp_shuffle.gfx90a warp_shuffle.gfx1030 warp_vote.gfx1030 mfma_unguarded.gfx90a
    wmma_unguarded.gfx1100 atomics_int.gfx90a block_sync_fences.gfx90a)
set(_kc_hip_index 0)
set(_kc_hip_outputs "")
foreach(_line IN LISTS _kc_hip_lines)
  string(REGEX MATCH "^([^\t]+)\t([^\t]+)\t([^\t]+)" _fields "${_line}")
  if(NOT _fields)
    message(FATAL_ERROR "tests/data/hip/corpus.tsv: malformed line: ${_line}")
  endif()
  set(_source "${CMAKE_MATCH_1}")
  set(_kernels "${CMAKE_MATCH_3}")
  string(REPLACE "," ";" _listed "${CMAKE_MATCH_2}")
  get_filename_component(_stem "${_source}" NAME_WE)
  kcache_corpus_archs("${_listed}" ${_kc_hip_index} 2 "${_stem}" "${_kc_hip_named}" _archs)
  math(EXPR _kc_hip_index "${_kc_hip_index} + 1")
  string(REPLACE ";" "," _built_archs "${_archs}")
  string(APPEND _kc_hip_built "${_source}\t${_built_archs}\t${_kernels}\t-\n")
  foreach(_arch IN LISTS _archs)
    # HIP 5.2's warpSize comes from __AMDGCN_WAVEFRONT_SIZE, which clang-22 no longer defines:
    # 64 on gfx9, 32 on gfx10 and newer (HIP's defaults).
    if(_arch MATCHES "^gfx1[0-9]")
      set(_wave 32)
    else()
      set(_wave 64)
    endif()
    # No -MD: clang writes no dependency file in HIP device-only mode, and ccache, finding none,
    # ran the compile a second time uncached. The sources include only the prelude and Debian's
    # HIP headers, which change with the package, not with the tree.
    set(_bc "${_kc_hip_out_dir}/${_stem}.${_arch}.bc")
    add_custom_command(
      OUTPUT "${_bc}"
      COMMAND ${KCACHE_COMPILER_LAUNCHER} "${KCACHE_CLANG}" ${_kc_hip_flags} --offload-arch=${_arch}
              -D__AMDGCN_WAVEFRONT_SIZE=${_wave} "${_kc_hip_src_dir}/${_source}" -o "${_bc}"
      DEPENDS "${_kc_hip_src_dir}/${_source}" "${_kc_hip_src_dir}/hip_prelude.h"
      COMMENT "HIP corpus: clang ${_source} (${_arch})"
      VERBATIM)
    list(APPEND _kc_hip_outputs "${_bc}")
  endforeach()
endforeach()

file(CONFIGURE OUTPUT "${KCACHE_HIP_CORPUS_TSV}" CONTENT "${_kc_hip_built}" @ONLY)
add_custom_target(kcache_hip_corpus ALL DEPENDS ${_kc_hip_outputs})
list(LENGTH _kc_hip_outputs _kc_hip_count)
message(STATUS "HIP corpus: ${_kc_hip_count} files in ${KCACHE_HIP_CORPUS_DIR} (archs: ${KCACHE_CORPUS_ARCHS})")

unset(_kc_hip_lines)
unset(_kc_hip_built)
unset(_kc_hip_named)
unset(_kc_hip_outputs)
unset(_kc_hip_count)
unset(_kc_hip_flags)
unset(_kc_hip_out_dir)
unset(_kc_hip_src_dir)
