/* Seed 004 §11.1's minimal host flow, as written, with A, B, C of type tsr_tensor_t.
   Prints C (19 x 13 floats) on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmod.h"

int main(void) {
  const void* image = &testmod_image;
  size_t image_size = sizeof testmod_image;
  int64_t M = 19, N = 13, K = 11;
  uint16_t* a = malloc(sizeof(uint16_t) * M * K);
  uint16_t* b = malloc(sizeof(uint16_t) * K * N);
  float* c = calloc((size_t)(M * N), sizeof(float));
  for (int64_t i = 0; i < M * K; i++) { /* small integers are exact in bf16: bits = f32 >> 16 */
    float v = (float)(i % 7 - 3);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    a[i] = (uint16_t)(bits >> 16);
  }
  for (int64_t i = 0; i < K * N; i++) {
    float v = (float)(i % 5 - 2);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    b[i] = (uint16_t)(bits >> 16);
  }
  int64_t a_shape[2] = {M, K}, b_shape[2] = {K, N}, c_shape[2] = {M, N};
  tsr_tensor_t A = {a, {kDLCPU, 0}, 2, {kDLBfloat, 16, 1}, a_shape, NULL, 0};
  tsr_tensor_t B = {b, {kDLCPU, 0}, 2, {kDLBfloat, 16, 1}, b_shape, NULL, 0};
  tsr_tensor_t C = {c, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, c_shape, NULL, 0};
  uint32_t Gx = (uint32_t)((M + 7) / 8), Gy = (uint32_t)((N + 7) / 8), Bx = 8, By = 8, smem = 0;

  tsr_context_t ctx; tsrCreateContext(&ctx);

  tsr_module_t mod = NULL;
  tsrLoadModule(ctx, image, image_size, &mod);

  tsr_kernel_t k; tsrGetKernel(mod, "tile_linear_bf16", &k);

  void* args[] = { &A, &B, &C, &M, &N, &K };
  tsr_launch_t launch = {.grid_x=Gx, .grid_y=Gy, .grid_z=1,
                         .block_x=Bx, .block_y=By, .block_z=1,
                         .smem_bytes=smem};
  tsr_stream_t stream = NULL; /* default */
  tsr_status_t status = tsrLaunch(k, stream, launch, args, 6);

  if (status != TSR_SUCCESS) {
    fprintf(stderr, "tsrLaunch: %d %s\n", (int)status, tsrGetLastError());
    return 1;
  }
  for (int64_t i = 0; i < M * N; i++) printf("%.9g\n", c[i]);
  return 0;
}
