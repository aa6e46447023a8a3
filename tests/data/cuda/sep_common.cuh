// Declarations shared by the separate-compilation group sep_a.cu / sep_b.cu / sep_c.cu (relocatable device code).
#pragma once
#include <cuda_runtime.h>

struct SimParams {
  float3 gravity;
  float dt;
  float damping;
  float restitution;
  float3 box_lo, box_hi;
  unsigned long long steps_done;
};

// Defined in sep_a.cu.
extern __device__ SimParams g_sim;
extern __device__ unsigned int g_collisions;
__device__ float3 integrate(float3 pos, float3& vel, float inv_mass);
__device__ float kinetic_energy(float3 vel, float mass);

// Defined in sep_b.cu.
extern __device__ float g_energy_budget;
__device__ bool resolve_walls(float3& pos, float3& vel);
__device__ float3 pair_force(float3 pi, float3 pj, float radius, float stiffness);
