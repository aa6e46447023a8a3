// Separate compilation, TU 2 of 3 (rdc): functions calling into sep_a.cu's `__device__` globals/functions, plus its own global.
#include "sep_common.cuh"

__device__ float g_energy_budget = 1.0e6f;

// Reflect off the simulation box; counts collisions in sep_a.cu's global counter.
__device__ bool resolve_walls(float3& pos, float3& vel) {
  const SimParams& p = g_sim;
  bool hit = false;
  float* c[3] = {&pos.x, &pos.y, &pos.z};
  float* v[3] = {&vel.x, &vel.y, &vel.z};
  const float lo[3] = {p.box_lo.x, p.box_lo.y, p.box_lo.z}, hi[3] = {p.box_hi.x, p.box_hi.y, p.box_hi.z};
  for (int a = 0; a < 3; ++a) {
    if (*c[a] < lo[a]) {
      *c[a] = lo[a] + (lo[a] - *c[a]);
      *v[a] = -*v[a] * p.restitution;
      hit = true;
    } else if (*c[a] > hi[a]) {
      *c[a] = hi[a] - (*c[a] - hi[a]);
      *v[a] = -*v[a] * p.restitution;
      hit = true;
    }
  }
  if (hit) atomicAdd(&g_collisions, 1u);
  return hit;
}

// Soft-sphere repulsion; caps the energy it injects with sep_a.cu's kinetic_energy.
__device__ float3 pair_force(float3 pi, float3 pj, float radius, float stiffness) {
  const float dx = pi.x - pj.x, dy = pi.y - pj.y, dz = pi.z - pj.z;
  const float d2 = dx * dx + dy * dy + dz * dz;
  const float r2 = 4.f * radius * radius;
  if (d2 >= r2 || d2 == 0.f) return make_float3(0.f, 0.f, 0.f);
  const float d = sqrtf(d2);
  const float overlap = 2.f * radius - d;
  float s = stiffness * overlap / d;
  const float3 f = make_float3(dx * s, dy * s, dz * s);
  if (kinetic_energy(f, g_sim.dt) > g_energy_budget) s *= 0.5f;
  return make_float3(dx * s, dy * s, dz * s);
}
