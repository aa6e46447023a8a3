// `__constant__` memory: convolution filter taps, a lookup table of structs, and a constant-indexed broadcast.
#include <cuda_runtime.h>

#define MAX_TAPS 63

__constant__ float c_taps[MAX_TAPS];
__constant__ int c_num_taps;

struct Camera {
  float fx, fy, cx, cy;
  float k1, k2, p1, p2;
  float rot[9];
  float trans[3];
};
__constant__ Camera c_cameras[8];
__constant__ unsigned char c_gamma_lut[256] = {
#define G4(i) (i), (i) + 1, (i) + 2, (i) + 3
    G4(0),   G4(4),   G4(8),   G4(12),  G4(16),  G4(20),  G4(24),  G4(28),  G4(32),  G4(36),  G4(40),
    G4(44),  G4(48),  G4(52),  G4(56),  G4(60),  G4(64),  G4(68),  G4(72),  G4(76),  G4(80),  G4(84),
    G4(88),  G4(92),  G4(96),  G4(100), G4(104), G4(108), G4(112), G4(116), G4(120), G4(124), G4(128),
    G4(132), G4(136), G4(140), G4(144), G4(148), G4(152), G4(156), G4(160), G4(164), G4(168), G4(172),
    G4(176), G4(180), G4(184), G4(188), G4(192), G4(196), G4(200), G4(204), G4(208), G4(212), G4(216),
    G4(220), G4(224), G4(228), G4(232), G4(236), G4(240), G4(244), G4(248), G4(252)
#undef G4
};

// 1D convolution along rows with the taps from constant memory (all threads read the same tap: broadcast).
__global__ void conv_rows(const float* __restrict__ in, float* __restrict__ out, int width, int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  if (x >= width || y >= height) return;
  const int r = c_num_taps / 2;
  float acc = 0.f;
  for (int t = 0; t < c_num_taps; ++t) {
    int xx = min(max(x + t - r, 0), width - 1);
    acc = fmaf(c_taps[t], in[y * width + xx], acc);
  }
  out[y * width + x] = acc;
}

// Project 3D points with one of several cameras held in constant memory, with radial/tangential distortion.
__global__ void project_points(const float3* __restrict__ pts, const int* __restrict__ cam_of, float2* __restrict__ uv,
                               int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Camera& cam = c_cameras[cam_of[i] & 7];
  const float3 p = pts[i];
  const float X = cam.rot[0] * p.x + cam.rot[1] * p.y + cam.rot[2] * p.z + cam.trans[0];
  const float Y = cam.rot[3] * p.x + cam.rot[4] * p.y + cam.rot[5] * p.z + cam.trans[1];
  const float Z = cam.rot[6] * p.x + cam.rot[7] * p.y + cam.rot[8] * p.z + cam.trans[2];
  const float xn = X / Z, yn = Y / Z;
  const float r2 = xn * xn + yn * yn;
  const float radial = 1.f + cam.k1 * r2 + cam.k2 * r2 * r2;
  const float xd = xn * radial + 2.f * cam.p1 * xn * yn + cam.p2 * (r2 + 2.f * xn * xn);
  const float yd = yn * radial + cam.p1 * (r2 + 2.f * yn * yn) + 2.f * cam.p2 * xn * yn;
  uv[i] = make_float2(cam.fx * xd + cam.cx, cam.fy * yd + cam.cy);
}

__global__ void apply_gamma(const uchar4* __restrict__ in, uchar4* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uchar4 p = in[i];
  out[i] = make_uchar4(c_gamma_lut[p.x], c_gamma_lut[p.y], c_gamma_lut[p.z], p.w);
}
