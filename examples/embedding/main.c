/* Calls the Tessera kernel block_sum from C: no Python at run time. */
#include <stdio.h>
#include <stdlib.h>

#include "blocksum.h"

int main(void) {
  int64_t n = 1000000, groups = (n + 255) / 256;
  float* x = malloc(sizeof(float) * n);
  float* partial = malloc(sizeof(float) * groups);
  double want = 0;
  for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 100) / 100.0f, want += x[i];

  tsr_context_t ctx;
  tsr_module_t mod;
  tsr_kernel_t k;
  if (tsrCreateContext(&ctx) != TSR_SUCCESS ||
      tsrLoadModule(ctx, &blocksum_image, sizeof blocksum_image, &mod) != TSR_SUCCESS ||
      tsrGetKernel(mod, "block_sum", &k) != TSR_SUCCESS) {
    fprintf(stderr, "tessera: %s\n", tsrGetLastError());
    return 1;
  }
  tsr_tensor_t X = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  tsr_tensor_t P = {partial, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &groups, NULL, 0};
  void* args[] = {&X, &P};
  tsr_launch_t launch = {.grid_x = (uint32_t)groups, .grid_y = 1, .grid_z = 1};
  if (tsrLaunch(k, NULL, launch, args, 2) != TSR_SUCCESS) {
    fprintf(stderr, "tessera: %s\n", tsrGetLastError());
    return 1;
  }
  double total = 0;
  for (int64_t g = 0; g < groups; g++) total += partial[g];
  printf("sum %.1f (want %.1f)\n", total, want);
  tsrUnloadModule(mod);
  tsrDestroyContext(ctx);
  return 0;
}
