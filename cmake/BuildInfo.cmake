# Writes kcache/build_info.h (what --version prints): run at every build by the kcache_build_info
# target, in script mode, so the commit is the one built; the file is rewritten only when its
# text changes, so only the version library compiles again. Given: SOURCE_DIR, OUT, VERSION,
# LLVM_VERSION, CUDA_VERSION.
set(commit "unknown (not built from a git checkout)")
find_program(git_program git)
if(git_program AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${git_program}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
  if(NOT failed)
    set(commit "${head}")
    execute_process(COMMAND "${git_program}" -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
    if(dirty)
      string(APPEND commit "+changes")
    endif()
  endif()
endif()
set(text "// Made by cmake/BuildInfo.cmake at build time.
#pragma once
#define KCACHE_VERSION \"${VERSION}\"
#define KCACHE_COMMIT \"${commit}\"
#define KCACHE_LLVM_VERSION \"${LLVM_VERSION}\"
#define KCACHE_CUDA_VERSION \"${CUDA_VERSION}\"
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
