// AddressSanitizer's defaults for every executable of a KCACHE_SANITIZE build (CMakeLists.txt adds
// this file to each). ASAN_OPTIONS set at run time still wins, flag by flag.
//
// quarantine_size_mb=32 (ASan's default is 256): freed memory stays poisoned, and so a use after
// free is caught, until 32 MB more has been freed after it. kcached's workers run LLVM, NVRTC and
// nvJitLink, which are not instrumented (their own reads of freed memory go unchecked at any
// quarantine size) and free hundreds of MB a compile. With 256 MB held, every worker kept mapping
// fresh pages instead of reusing freed ones: a 2-arch compile of LargeReplies' module took 10.4
// CPU-s under the sanitizers, 6.4 with 32 MB, 3.2 without them; the whole sanitizer pass 601 CPU-s,
// 557 with 32 MB. Processes that free less than 32 MB in all (the tests, most daemons) keep every
// freed block poisoned as before.
const char* __asan_default_options(void);
const char* __asan_default_options(void) { return "quarantine_size_mb=32"; }
