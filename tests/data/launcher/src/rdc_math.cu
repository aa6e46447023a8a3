// A device function other translation units call (relocatable device code).
__device__ float rdc_scale(float v) { return v * 0.5f + 1.0f; }
