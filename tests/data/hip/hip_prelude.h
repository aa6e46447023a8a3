// Prelude for compiling the HIP corpus with clang-22 against Debian's HIP 5.2.3 headers
// (libamdhip64-dev, /usr/include/hip). Passed with `-include hip_prelude.h`; clang's own
// __clang_hip_runtime_wrapper.h is included before it, so __device__ and __2f16 already exist.
#ifndef KCACHE_HIP_PRELUDE_H
#define KCACHE_HIP_PRELUDE_H

// 1. amd_warp_functions.h: `static constexpr int warpSize = __AMDGCN_WAVEFRONT_SIZE;`, and
//    hip_runtime.h tests it against gfx10. clang <= 18 predefined the macro; clang-22 does not
//    (wave size is now a run-time/target-feature property). The build passes
//    -D__AMDGCN_WAVEFRONT_SIZE=64 (gfx9) or =32 (gfx10/gfx11, HIP's default wave32 there);
//    this fallback only applies when the flag is missing.
#ifndef __AMDGCN_WAVEFRONT_SIZE
#if defined(__GFX10__) || defined(__GFX11__) || defined(__GFX12__)
#define __AMDGCN_WAVEFRONT_SIZE 32
#else
#define __AMDGCN_WAVEFRONT_SIZE 64
#endif
#endif

#if defined(__HIP_DEVICE_COMPILE__) && defined(__CLANG_HIP_RUNTIME_WRAPPER_INCLUDED__)
// 2. amd_hip_fp16.h (hrcp, h2rcp) calls these two. HIP 5.2 declares them in
//    hip_fp16_math_fwd.h only when clang's wrapper is NOT included (it expected clang's
//    __clang_hip_libdevice_declares.h to declare them, which clang-22 no longer does). Nothing
//    in rocm-device-libs defines them either, so they are written on the rcp builtin
//    (v_rcp_f16, gfx8+), which is what the old declaration lowered to.
__device__ inline __attribute__((const)) _Float16 __llvm_amdgcn_rcp_f16(_Float16 __x) {
  return static_cast<_Float16>(__builtin_amdgcn_rcph(__x));  // the builtin returns __fp16
}
__device__ inline __attribute__((const)) __2f16 __llvm_amdgcn_rcp_2f16(__2f16 __x) {
  return __2f16{__llvm_amdgcn_rcp_f16(__x.x), __llvm_amdgcn_rcp_f16(__x.y)};
}
#endif

#endif  // KCACHE_HIP_PRELUDE_H
