// Separate compilation, TU 3 of 3 (rdc): the simulation kernels, calling functions and globals defined in sep_a.cu and sep_b.cu.
#include "sep_common.cuh"

__global__ void step_particles(float3* __restrict__ pos, float3* __restrict__ vel, const float* __restrict__ inv_mass, int n,
                               float radius, float stiffness) {
  extern __shared__ float3 s_pos[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float3 p = i < n ? pos[i] : make_float3(0.f, 0.f, 0.f);
  float3 v = i < n ? vel[i] : make_float3(0.f, 0.f, 0.f);
  float3 f = make_float3(0.f, 0.f, 0.f);
  for (int base = 0; base < n; base += blockDim.x) {
    const int j0 = base + static_cast<int>(threadIdx.x);
    s_pos[threadIdx.x] = j0 < n ? pos[j0] : make_float3(1e30f, 1e30f, 1e30f);
    __syncthreads();
    for (int j = 0; j < static_cast<int>(blockDim.x); ++j) {
      if (base + j == i) continue;
      const float3 pf = pair_force(p, s_pos[j], radius, stiffness);
      f.x += pf.x;
      f.y += pf.y;
      f.z += pf.z;
    }
    __syncthreads();
  }
  if (i >= n) return;
  const float im = inv_mass[i];
  v.x += f.x * im * g_sim.dt;
  v.y += f.y * im * g_sim.dt;
  v.z += f.z * im * g_sim.dt;
  p = integrate(p, v, im);
  resolve_walls(p, v);
  pos[i] = p;
  vel[i] = v;
  if (i == 0) atomicAdd(&g_sim.steps_done, 1ull);
}

__global__ void total_energy(const float3* __restrict__ vel, const float* __restrict__ inv_mass, int n, float* __restrict__ out,
                             unsigned* __restrict__ collisions_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float e = 0.f;
  if (i < n && inv_mass[i] > 0.f) e = kinetic_energy(vel[i], 1.f / inv_mass[i]);
  for (int off = 16; off > 0; off >>= 1) e += __shfl_down_sync(0xffffffffu, e, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, e);
  if (i == 0) *collisions_out = g_collisions;
  if (i == 0 && *out > g_energy_budget) g_energy_budget *= 2.f;
}
