// Whether this build of kcached runs under AddressSanitizer (deploy/dev.sh's sanitizer pass):
// its workers then take no address-space limit, and kcached runs LeakSanitizer's check itself
// before it leaves with std::_Exit (main.cpp).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define KCACHE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KCACHE_ASAN 1
#endif
#endif

namespace kcache::server {
#ifdef KCACHE_ASAN
inline constexpr bool k_asan = true;
#else
inline constexpr bool k_asan = false;
#endif
}  // namespace kcache::server
