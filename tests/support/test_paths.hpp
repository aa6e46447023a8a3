// Where the tests find the programs, tools and data they run: absolute paths of this build and
// checkout, written by CMake into test_paths.cpp in the build folder (tests/CMakeLists.txt).
// They live in one generated source rather than in -D flags so that no other unit's compile
// command names the checkout: ccache then shares every other unit's object between clones.
#pragma once

namespace kcache::test::paths {
extern const char* const k_daemon;             // build/server/kcached
extern const char* const k_faulty_daemon;      // build/tests/kcached-faults
extern const char* const k_cli;                // build/client/kcache
extern const char* const k_capi_test;          // build/tests/kcache_capi_test
extern const char* const k_test_data;          // tests/data in the source tree
extern const char* const k_source_dir;         // the source tree
extern const char* const k_llc;                // LLVM 22's llc
extern const char* const k_clang;              // clang-22
extern const char* const k_llvm_tools;         // LLVM 22's bin folder
extern const char* const k_cuda_root;          // the CUDA toolkit searched by default
extern const char* const k_cuda_corpus;        // the built CUDA corpus, or "" when not built
extern const char* const k_cuda_corpus_skip;   // why it was not built
extern const char* const k_cuda_corpus_tsv;    // its module list as built (the archs picked)
extern const char* const k_amd_corpus;         // the built AMD corpus, or ""
extern const char* const k_hip_corpus;         // the built HIP corpus, or ""
extern const char* const k_hip_corpus_skip;    // why it was not built
extern const char* const k_hip_corpus_tsv;     // its file list as built (the archs picked)
}  // namespace kcache::test::paths

// The names the tests have always used.
#define KCACHE_DAEMON_PATH ::kcache::test::paths::k_daemon
#define KCACHE_FAULTY_DAEMON_PATH ::kcache::test::paths::k_faulty_daemon
#define KCACHE_CLI_PATH ::kcache::test::paths::k_cli
#define KCACHE_CAPI_TEST_PATH ::kcache::test::paths::k_capi_test
#define KCACHE_TEST_DATA_DIR ::kcache::test::paths::k_test_data
#define KCACHE_SOURCE_DIR ::kcache::test::paths::k_source_dir
#define KCACHE_LLC_PATH ::kcache::test::paths::k_llc
#define KCACHE_CLANG_PATH ::kcache::test::paths::k_clang
#define KCACHE_LLVM_TOOLS_DIR ::kcache::test::paths::k_llvm_tools
#define KCACHE_CUDA_ROOT ::kcache::test::paths::k_cuda_root
#define KCACHE_CUDA_CORPUS_DIR ::kcache::test::paths::k_cuda_corpus
#define KCACHE_CUDA_CORPUS_SKIP_REASON ::kcache::test::paths::k_cuda_corpus_skip
#define KCACHE_CUDA_CORPUS_TSV ::kcache::test::paths::k_cuda_corpus_tsv
#define KCACHE_AMD_CORPUS_DIR ::kcache::test::paths::k_amd_corpus
#define KCACHE_HIP_CORPUS_TSV ::kcache::test::paths::k_hip_corpus_tsv
#define KCACHE_HIP_CORPUS_DIR ::kcache::test::paths::k_hip_corpus
#define KCACHE_HIP_CORPUS_SKIP_REASON ::kcache::test::paths::k_hip_corpus_skip
