# Every dependency is a Debian 12 package (deploy/install-deps.sh installs them).

find_package(LLVM 22.1 REQUIRED CONFIG)  # LLVM's version file accepts only major.minor
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")

# Debian's RocksDB config refers to a zstd::zstd target that nothing defines.
find_package(zstd CONFIG QUIET)
if(TARGET zstd::libzstd_shared AND NOT TARGET zstd::zstd)
  add_library(zstd::zstd INTERFACE IMPORTED)
  target_link_libraries(zstd::zstd INTERFACE zstd::libzstd_shared)
endif()
find_package(RocksDB CONFIG REQUIRED)

find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)  # gRPC's own; kcached turns off its mutex deadlock detection
# kcache_grpc: gRPC and Protobuf as a program links them. A program that sets KCACHE_STATIC_GRPC
# links Debian's archives of gRPC, Protobuf, Abseil and what they use instead, where all are
# installed: kcache-grpc starts on every compile the front does not answer, and mapping and
# binding some sixty shared libraries was most of its start-up (15 ms of `--version`; 3.5 ms so).
# zlib stays shared: Debian's policy keeps it one copy (lintian: embedded-library).
set(kcache_grpc_archives)
foreach(name grpc++ grpc address_sorting re2 upb cares gpr protobuf ssl crypto)
  find_library(KCACHE_ARCHIVE_${name} lib${name}.a)
  if(KCACHE_ARCHIVE_${name})
    list(APPEND kcache_grpc_archives ${KCACHE_ARCHIVE_${name}})
  else()
    set(kcache_grpc_archives_missing ON)
  endif()
endforeach()
file(GLOB kcache_absl_archives /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libabsl_*.a)
if(kcache_grpc_archives_missing OR NOT kcache_absl_archives)
  set(kcache_grpc_archives)
endif()
set(static_grpc "$<AND:$<BOOL:${kcache_grpc_archives}>,$<BOOL:$<TARGET_PROPERTY:KCACHE_STATIC_GRPC>>>")
add_library(kcache_grpc INTERFACE)
target_link_libraries(kcache_grpc INTERFACE "$<$<NOT:${static_grpc}>:gRPC::grpc++>"
                      "$<$<NOT:${static_grpc}>:protobuf::libprotobuf>")
target_include_directories(kcache_grpc INTERFACE $<TARGET_PROPERTY:gRPC::grpc++,INTERFACE_INCLUDE_DIRECTORIES>)
# Abseil's archives use one another in no one order: one group.
foreach(item ${kcache_grpc_archives} -Wl,--start-group ${kcache_absl_archives} -Wl,--end-group -lz -ldl -pthread)
  target_link_libraries(kcache_grpc INTERFACE "$<${static_grpc}:${item}>")
endforeach()
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
# OpenSSL: gRPC and cpp-httplib use it, and kcached's HTTP listener (server/http.cpp) does TLS with
# it directly; SHA-256 is Nettle (common/src/sha256.cpp).
find_package(OpenSSL REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
find_package(Threads REQUIRED)
# cpp-httplib serves /metrics; Debian ships it as a compiled library with a pkg-config file.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(NETTLE REQUIRED IMPORTED_TARGET nettle)  # SHA-256 (common/src/sha256.cpp)
# hiredis 0.14 (sync API, no TLS, no cluster): the Redis remote tier, server/remote/ alone.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)  # HPACK (server/net/grpc_calls.cpp)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)  # the jail's filter (server/compile/jail.cpp)
# toml++ reads TOML manifests (client/src/manifest.cpp). Debian's pkg-config file asks for its
# shared library (TOML_HEADER_ONLY=0); it is used header-only instead, in that one file, so
# neither kcache-grpc nor the runtime image needs libtomlplusplus3.
pkg_check_modules(TOMLPLUSPLUS REQUIRED tomlplusplus>=3)
add_library(kcache_tomlplusplus INTERFACE)
target_include_directories(kcache_tomlplusplus SYSTEM INTERFACE ${TOMLPLUSPLUS_INCLUDE_DIRS})
target_compile_definitions(kcache_tomlplusplus INTERFACE TOML_HEADER_ONLY=1 TOML_ENABLE_FORMATTERS=0)

# The CUDA toolkit is optional: kcached finds ptxas at run time; the build only records a default.
set(KCACHE_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root searched at run time by default")
