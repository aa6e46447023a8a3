// Separate compilation, TU 1 of 3 (rdc): defines `__device__` globals and `__device__` functions used by sep_b.cu and sep_c.cu.
#include "sep_common.cuh"

__device__ SimParams g_sim = {{0.f, -9.81f, 0.f}, 1e-3f, 0.999f, 0.8f, {-1.f, -1.f, -1.f}, {1.f, 1.f, 1.f}, 0ull};
__device__ unsigned int g_collisions = 0;

// Semi-implicit Euler with damping; external linkage so other TUs can call it.
__device__ float3 integrate(float3 pos, float3& vel, float inv_mass) {
  const SimParams& p = g_sim;
  const float g = inv_mass > 0.f ? 1.f : 0.f;  // static bodies are not pulled down
  vel.x = (vel.x + p.gravity.x * g * p.dt) * p.damping;
  vel.y = (vel.y + p.gravity.y * g * p.dt) * p.damping;
  vel.z = (vel.z + p.gravity.z * g * p.dt) * p.damping;
  return make_float3(pos.x + vel.x * p.dt, pos.y + vel.y * p.dt, pos.z + vel.z * p.dt);
}

__device__ float kinetic_energy(float3 vel, float mass) { return 0.5f * mass * (vel.x * vel.x + vel.y * vel.y + vel.z * vel.z); }

// A kernel in this TU too (only resets the shared counters).
__global__ void reset_sim_counters() {
  g_collisions = 0;
  g_sim.steps_done = 0;
}
