# The CUDA pattern corpus (tests/data/cuda): every source of corpus.tsv compiled, for the archs of
# its module that KCACHE_CORPUS_ARCHS picks (kcache_corpus_archs: one per module, taking turns, or
# every arch it lists), by clang to device bitcode and, where the CUDA toolkit has nvcc, by nvcc
# to PTX.
#
# include()d from tests/CMakeLists.txt. Inputs:
#   KCACHE_CLANG      clang-22 (the project sets it)
#   KCACHE_CUDA_ROOT  the CUDA toolkit (/usr/local/cuda)
# Outputs:
#   target kcache_cuda_corpus (ALL)     builds ${CMAKE_CURRENT_BINARY_DIR}/cuda/<stem>.<arch>.bc
#                                       and, with nvcc, <stem>.<arch>.nvcc.ptx
#   KCACHE_CUDA_CORPUS_DIR              that folder, or empty when the corpus cannot be built
#   KCACHE_CUDA_CORPUS_SKIP_REASON      why it is empty (for GTEST_SKIP), else empty
#   KCACHE_CUDA_CORPUS_NVCC             ON when the nvcc PTX files are built too
#   KCACHE_CUDA_CORPUS_TSV              the module list as built (tab-separated: module sources archs
#                                       flags notes), written beside the files: the archs built

set(KCACHE_CUDA_CORPUS_TSV "${CMAKE_CURRENT_LIST_DIR}/corpus.tsv")
set(_kc_corpus_list "${KCACHE_CUDA_CORPUS_TSV}")
set(_kc_corpus_src_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_kc_corpus_out_dir "${CMAKE_CURRENT_BINARY_DIR}/cuda")
set(KCACHE_CUDA_CORPUS_DIR "")
set(KCACHE_CUDA_CORPUS_SKIP_REASON "")
set(KCACHE_CUDA_CORPUS_NVCC OFF)

# Re-run configure when the module list changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${KCACHE_CUDA_CORPUS_TSV}")

if(NOT KCACHE_CLANG OR NOT EXISTS "${KCACHE_CLANG}")
  set(KCACHE_CUDA_CORPUS_SKIP_REASON "clang (KCACHE_CLANG='${KCACHE_CLANG}') not found")
elseif(NOT KCACHE_CUDA_ROOT OR NOT EXISTS "${KCACHE_CUDA_ROOT}/include/cuda_runtime.h")
  set(KCACHE_CUDA_CORPUS_SKIP_REASON "CUDA toolkit headers not found under KCACHE_CUDA_ROOT='${KCACHE_CUDA_ROOT}'")
elseif(NOT EXISTS "${KCACHE_CUDA_ROOT}/nvvm/libdevice/libdevice.10.bc")
  set(KCACHE_CUDA_CORPUS_SKIP_REASON "libdevice not found under '${KCACHE_CUDA_ROOT}/nvvm/libdevice'")
endif()

if(KCACHE_CUDA_CORPUS_SKIP_REASON)
  message(STATUS "CUDA corpus: not built (${KCACHE_CUDA_CORPUS_SKIP_REASON})")
  add_custom_target(kcache_cuda_corpus ALL)
  return()
endif()

if(EXISTS "${KCACHE_CUDA_ROOT}/bin/nvcc")
  set(KCACHE_CUDA_CORPUS_NVCC ON)
endif()
set(KCACHE_CUDA_CORPUS_DIR "${_kc_corpus_out_dir}")
file(MAKE_DIRECTORY "${_kc_corpus_out_dir}")

# clang-22 knows CUDA up to 12.x: -Wno-unknown-cuda-version silences the warning for CUDA 13 (clang
# then targets the newest PTX it knows, +ptx88). The CUDA 13 headers include <cuda/std/...> (CCCL),
# which lives in include/cccl.
set(_kc_clang_flags
  -x cuda --cuda-path=${KCACHE_CUDA_ROOT} --cuda-device-only -emit-llvm -c -O2
  -Wno-unknown-cuda-version -I${KCACHE_CUDA_ROOT}/include/cccl)

kcache_corpus_lines("${_kc_corpus_list}" _kc_corpus_lines)
set(KCACHE_CUDA_CORPUS_TSV "${_kc_corpus_out_dir}/corpus.tsv")
set(_kc_corpus_built "module\tsources\tarchs\tflags\tnotes\n")
set(_kc_corpus_index 0)
# Modules that tests read by name (driver_test.cpp), built for these archs whatever the sample
# picks; like every built module, in the parity test too.
set(_kc_corpus_named warp_shuffle.sm_80 ptx_isa_newer_sm90.sm_90)
set(_kc_corpus_outputs "")
set(_kc_corpus_seen "")  # "<stem>.<arch>" already given a rule
foreach(_line IN LISTS _kc_corpus_lines)
  # The notes are free text: take the first four tab-separated fields only.
  string(REGEX MATCH "^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)" _fields "${_line}")
  if(NOT _fields)
    message(FATAL_ERROR "corpus.tsv: malformed line: ${_line}")
  endif()
  set(_module "${CMAKE_MATCH_1}")
  set(_sources_field "${CMAKE_MATCH_2}")
  set(_flags_field "${CMAKE_MATCH_4}")
  string(REPLACE "," ";" _sources "${CMAKE_MATCH_2}")
  string(REPLACE "," ";" _archs "${CMAKE_MATCH_3}")
  string(REPLACE "," ";" _flags "${CMAKE_MATCH_4}")
  kcache_corpus_archs("${_archs}" ${_kc_corpus_index} 1 "${_module}" "${_kc_corpus_named}" _archs)
  math(EXPR _kc_corpus_index "${_kc_corpus_index} + 1")
  string(REPLACE ";" "," _built_archs "${_archs}")
  string(APPEND _kc_corpus_built "${_module}\t${_sources_field}\t${_built_archs}\t${_flags_field}\t-\n")

  set(_clang_extra "")
  set(_nvcc_extra "")
  if("rdc" IN_LIST _flags)
    list(APPEND _clang_extra -fgpu-rdc)
    list(APPEND _nvcc_extra -rdc=true)
  endif()

  foreach(_source IN LISTS _sources)
    set(_src "${_kc_corpus_src_dir}/${_source}")
    if(NOT EXISTS "${_src}")
      message(FATAL_ERROR "corpus.tsv: module ${_module}: ${_source} does not exist")
    endif()
    get_filename_component(_stem "${_source}" NAME_WE)
    foreach(_arch IN LISTS _archs)
      if("${_stem}.${_arch}" IN_LIST _kc_corpus_seen)
        message(FATAL_ERROR "corpus.tsv: ${_source} for ${_arch} appears in more than one module")
      endif()
      list(APPEND _kc_corpus_seen "${_stem}.${_arch}")

      set(_bc "${_kc_corpus_out_dir}/${_stem}.${_arch}.bc")
      add_custom_command(
        OUTPUT "${_bc}"
        COMMAND ${KCACHE_COMPILER_LAUNCHER} "${KCACHE_CLANG}" ${_kc_clang_flags} --cuda-gpu-arch=${_arch} ${_clang_extra}
                -MD -MF "${_bc}.d" -MT "${_bc}" "${_src}" -o "${_bc}"
        DEPENDS "${_src}"
        DEPFILE "${_bc}.d"
        COMMENT "CUDA corpus: clang ${_source} (${_arch})"
        VERBATIM)
      list(APPEND _kc_corpus_outputs "${_bc}")

      # Not for the huge kernel: nvcc took 35 s on it (a sixth of the corpus's build), and its
      # tests (the time limit, the clang parity job) read clang's bitcode.
      # `-c -ptx` writes what `-ptx` alone writes, byte for byte, but ccache takes only commands
      # with -c: with it, a warm build reads these 49 files instead of running nvcc on each.
      if(KCACHE_CUDA_CORPUS_NVCC AND NOT "huge" IN_LIST _flags)
        set(_ptx "${_kc_corpus_out_dir}/${_stem}.${_arch}.nvcc.ptx")
        add_custom_command(
          OUTPUT "${_ptx}"
          COMMAND ${KCACHE_COMPILER_LAUNCHER} "${KCACHE_CUDA_ROOT}/bin/nvcc" -c -ptx -arch=${_arch} ${_nvcc_extra}
                  -MD -MF "${_ptx}.d" -MT "${_ptx}" "${_src}" -o "${_ptx}"
          DEPENDS "${_src}"
          DEPFILE "${_ptx}.d"
          COMMENT "CUDA corpus: nvcc ${_source} (${_arch})"
          VERBATIM)
        list(APPEND _kc_corpus_outputs "${_ptx}")
      endif()
    endforeach()
  endforeach()
endforeach()

file(CONFIGURE OUTPUT "${KCACHE_CUDA_CORPUS_TSV}" CONTENT "${_kc_corpus_built}" @ONLY)
add_custom_target(kcache_cuda_corpus ALL DEPENDS ${_kc_corpus_outputs})
list(LENGTH _kc_corpus_outputs _kc_corpus_count)
message(STATUS "CUDA corpus: ${_kc_corpus_count} files in ${KCACHE_CUDA_CORPUS_DIR} (nvcc: ${KCACHE_CUDA_CORPUS_NVCC}, "
               "archs: ${KCACHE_CORPUS_ARCHS})")

unset(_kc_corpus_lines)
unset(_kc_corpus_built)
unset(_kc_corpus_named)
unset(_kc_corpus_outputs)
unset(_kc_corpus_seen)
unset(_kc_corpus_count)
unset(_kc_clang_flags)
