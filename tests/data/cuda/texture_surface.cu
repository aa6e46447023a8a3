// Texture and surface objects: `cudaTextureObject_t` with `tex2D<float>`, `tex2D<float4>`, `tex1Dfetch`, `tex3D`, `tex2DLod`, and `cudaSurfaceObject_t` with `surf2Dwrite`/`surf2Dread`.
#include <cuda_runtime.h>

// Bilinear resize through the texture unit (normalised coordinates, linear filtering set on the host),
// written with surf2Dwrite into a CUDA array bound as a surface.
__global__ void resize_bilinear(cudaTextureObject_t src, cudaSurfaceObject_t dst, int out_w, int out_h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= out_w || y >= out_h) return;
  const float u = (x + 0.5f) / out_w, v = (y + 0.5f) / out_h;
  const float value = tex2D<float>(src, u, v);
  surf2Dwrite(value, dst, x * static_cast<int>(sizeof(float)), y);
}

// Sobel edge magnitude from an RGBA float4 texture (clamp addressing handles the borders).
__global__ void sobel_rgba(cudaTextureObject_t rgba, cudaSurfaceObject_t mag, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  auto lum = [&](int dx, int dy) {
    const float4 p = tex2D<float4>(rgba, x + dx + 0.5f, y + dy + 0.5f);
    return 0.299f * p.x + 0.587f * p.y + 0.114f * p.z;
  };
  const float gx = -lum(-1, -1) - 2.f * lum(-1, 0) - lum(-1, 1) + lum(1, -1) + 2.f * lum(1, 0) + lum(1, 1);
  const float gy = -lum(-1, -1) - 2.f * lum(0, -1) - lum(1, -1) + lum(-1, 1) + 2.f * lum(0, 1) + lum(1, 1);
  const float m = sqrtf(gx * gx + gy * gy);
  const uchar4 out = make_uchar4(static_cast<unsigned char>(fminf(m * 255.f, 255.f)), 0, 0, 255);
  surf2Dwrite(out, mag, x * static_cast<int>(sizeof(uchar4)), y, cudaBoundaryModeClamp);
}

// In-place surface update (read-modify-write) e.g. exponential moving average of frames.
__global__ void ema_surface(cudaSurfaceObject_t acc, cudaTextureObject_t frame, int w, int h, float alpha) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float old;
  surf2Dread(&old, acc, x * static_cast<int>(sizeof(float)), y);
  const float cur = tex2D<float>(frame, x + 0.5f, y + 0.5f);
  surf2Dwrite(old + alpha * (cur - old), acc, x * static_cast<int>(sizeof(float)), y);
}

// Linear-memory texture (tex1Dfetch) for a gather-heavy SpMV, and tex3D for trilinear volume sampling.
__global__ void spmv_tex(const int* __restrict__ row_ptr, const int* __restrict__ cols, const float* __restrict__ vals,
                         cudaTextureObject_t x_tex, float* __restrict__ y, int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.f;
  for (int j = row_ptr[r]; j < row_ptr[r + 1]; ++j) acc += vals[j] * tex1Dfetch<float>(x_tex, cols[j]);
  y[r] = acc;
}

__global__ void raymarch_volume(cudaTextureObject_t volume, const float3* __restrict__ origins, const float3* __restrict__ dirs,
                                float* __restrict__ out, int nrays, int steps, float dt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nrays) return;
  float3 p = origins[i];
  const float3 d = dirs[i];
  float transmittance = 1.f, radiance = 0.f;
  for (int s = 0; s < steps && transmittance > 0.01f; ++s) {
    const float density = tex3D<float>(volume, p.x, p.y, p.z);
    const float a = 1.f - __expf(-density * dt);
    radiance += transmittance * a * density;
    transmittance *= 1.f - a;
    p.x += d.x * dt;
    p.y += d.y * dt;
    p.z += d.z * dt;
  }
  out[i] = radiance;
}

// Mip-mapped sampling with an explicit level of detail, and a layered 2D texture.
__global__ void sample_lod_layered(cudaTextureObject_t mip, cudaTextureObject_t layers, float* __restrict__ out, int w, int h,
                                   float lod, int nlayers) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const float u = (x + 0.5f) / w, v = (y + 0.5f) / h;
  float s = tex2DLod<float>(mip, u, v, lod);
  for (int l = 0; l < nlayers; ++l) s += tex2DLayered<float>(layers, u, v, l);
  out[y * w + x] = s;
}
