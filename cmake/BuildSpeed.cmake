# How the build is made fast on a 2-core machine, without changing what it builds. Measured with
# deploy/build-profile.sh; the figures are in docs/development.md.
#
#   KCACHE_CCACHE      ccache as the compiler launcher where it is installed (install-deps adds it)
#   KCACHE_LLD         link with LLVM's lld (lld-22) instead of GNU ld
#   KCACHE_DEBUG_INFO  "lines" (line tables: backtraces, sanitizer reports and perf keep their
#                      file:line) or "full" (-g, for a debugger session); RelWithDebInfo only
#
# Precompiled headers were tried and are not used. For the server's units the time is code
# generation for the templates they instantiate (CLI11, spdlog, gRPC), not parsing.
# server/worker/worker.cpp with a PCH of gRPC, LLVM, RocksDB, spdlog, CLI11 and cpp-httplib
# (420 MB): g++ 21.5 s against 17.6 s without (parsing alone, -fsyntax-only: 6.1 s against 7.2 s);
# clang++ -O1 under ASan: 19.4 s against 19.5 s, and each target would also compile its PCH (37 s
# with g++). The test files do spend half their time on shared headers, but a PCH of them (320 MB)
# made fleet_test.cpp 14.7 s instead of 16.3: they are built 7 to a unit instead (tests/).

option(KCACHE_CCACHE "Compile through ccache where it is installed" ON)
option(KCACHE_LLD "Link with ld.lld from LLVM 22 where it is installed" ON)
set(KCACHE_DEBUG_INFO "lines" CACHE STRING "Debug information in RelWithDebInfo: lines or full")
set_property(CACHE KCACHE_DEBUG_INFO PROPERTY STRINGS lines full)

# Full DWARF was a third of a heavy unit's compile time (server/worker/worker.cpp: 19.5 s with -g,
# 13.7 s with -g1) and most of each link's input.
if(KCACHE_DEBUG_INFO STREQUAL "lines")
  foreach(lang C CXX)
    string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_${lang}_FLAGS_RELWITHDEBINFO
           "${CMAKE_${lang}_FLAGS_RELWITHDEBINFO}")
  endforeach()
elseif(NOT KCACHE_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "KCACHE_DEBUG_INFO is '${KCACHE_DEBUG_INFO}': use lines or full")
endif()

# ccache, keyed so that another clone of the repository in another folder (CI's fresh clone, a
# second worktree) hits what this one compiled:
# - base_dir: absolute paths under the source tree are hashed as paths relative to the build
#   folder, which is the same in every clone;
# - hash_dir off: the working folder is not hashed for units with debug information (an object
#   may then name the other clone's folder as its DW_AT_comp_dir; a debugger given the source
#   folder still finds every file);
# - sloppiness: the precompiled headers' own rules (ccache's manual, "Precompiled headers"), and
#   generated headers newer than the compile are still hashed by content.
# No absolute path of the checkout may reach a compile command's -D (tests/ keeps its paths in a
# generated source for this reason), or every clone misses on every unit that sees it.
find_program(KCACHE_CCACHE_PROGRAM ccache)
if(KCACHE_CCACHE AND KCACHE_CCACHE_PROGRAM)
  set(launcher env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
      CCACHE_SLOPPINESS=include_file_mtime,include_file_ctime
      ${KCACHE_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
  set(KCACHE_COMPILER_LAUNCHER ${launcher})  # for the corpora's clang and nvcc commands in tests/
  message(STATUS "Compiling through ${KCACHE_CCACHE_PROGRAM}")
else()
  set(KCACHE_COMPILER_LAUNCHER "")
endif()

# lld links kcached (libLLVM, gRPC, RocksDB) in about a tenth of GNU ld's time. LLVM 22's lld
# (lld-22, installed with the project's packages); /usr/bin/ld.lld may be another version or
# missing. g++ takes the linker's folder with -B; clang takes the path itself.
find_program(KCACHE_LLD_PROGRAM ld.lld HINTS ${LLVM_TOOLS_BINARY_DIR} NO_DEFAULT_PATH)
if(KCACHE_LLD AND KCACHE_LLD_PROGRAM)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    add_link_options(--ld-path=${KCACHE_LLD_PROGRAM})
  else()
    get_filename_component(lld_dir ${KCACHE_LLD_PROGRAM} DIRECTORY)
    add_link_options(-fuse-ld=lld -B${lld_dir})
  endif()
  message(STATUS "Linking with ${KCACHE_LLD_PROGRAM}")
endif()

