/* The runtime's CUDA path (against tests/c/fake_cuda.c): loads module "cudamod", launches
 * block_sum over 4 groups on its own stream, then linear_relu (whose shared memory is over
 * 48 KiB) over a 2 x 3 grid. Prints each step's status; the tensors' data pointers,
 * printed too, let the test check the launch parameters the fake recorded. */
#include <stdio.h>
#include <stdlib.h>

#include "cudamod.h"

#define STEP(call)                                                            \
  do {                                                                        \
    tsr_status_t s_ = (call);                                                 \
    printf("%s %d %s\n", #call, (int)s_, s_ ? tsrGetLastError() : "");       \
    if (s_) return 1;                                                         \
  } while (0)

int main(void) {
  tsr_context_desc_t desc = {kDLCUDA, 0, 0};
  tsr_context_t ctx;
  tsr_module_t mod;
  tsr_kernel_t sum, gemm;
  tsr_stream_t stream;
  STEP(tsrCreateContextEx(&desc, &ctx));
  STEP(tsrLoadModule(ctx, &cudamod_image, sizeof cudamod_image, &mod));
  STEP(tsrGetKernel(mod, "block_sum", &sum));
  STEP(tsrGetKernel(mod, "linear_relu", &gemm));
  STEP(tsrStreamCreate(ctx, &stream));
  void *x, *partial, *a, *b, *bias, *c;
  STEP(tsrAlloc(ctx, 1000 * 4, TSR_MEM_DEVICE, &x));
  STEP(tsrAlloc(ctx, 4 * 4, TSR_MEM_DEVICE, &partial));
  int64_t n = 1000, groups = 4;
  tsr_tensor_t X = {x, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  tsr_tensor_t P = {partial, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, &groups, NULL, 0};
  void* args[] = {&X, &P};
  tsr_launch_t launch = {4, 1, 1, 256, 1, 1, 0};
  STEP(tsrLaunch(sum, stream, launch, args, 2));
  STEP(tsrStreamSynchronize(stream, 1000));
  printf("x %llx partial %llx\n", (unsigned long long)(uintptr_t)x,
         (unsigned long long)(uintptr_t)partial);

  int64_t sa[2] = {100, 72}, sb[2] = {72, 150}, sbias[1] = {150}, sc[2] = {100, 150};
  STEP(tsrAlloc(ctx, 100 * 72 * 4, TSR_MEM_DEVICE, &a));
  STEP(tsrAlloc(ctx, 72 * 150 * 4, TSR_MEM_DEVICE, &b));
  STEP(tsrAlloc(ctx, 150 * 4, TSR_MEM_DEVICE, &bias));
  STEP(tsrAlloc(ctx, 100 * 150 * 4, TSR_MEM_DEVICE, &c));
  tsr_tensor_t A = {a, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, sa, NULL, 0};
  tsr_tensor_t B = {b, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, sb, NULL, 0};
  tsr_tensor_t Bias = {bias, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, sbias, NULL, 0};
  tsr_tensor_t C = {c, {kDLCUDA, 0}, 2, {kDLFloat, 32, 1}, sc, NULL, 0};
  void* gemm_args[] = {&A, &B, &Bias, &C};
  tsr_launch_t grid = {2, 3, 1, 0, 0, 0, 0};
  STEP(tsrLaunch(gemm, NULL, grid, gemm_args, 4));
  STEP(tsrLaunch(gemm, NULL, grid, gemm_args, 4));
  tsr_tensor_t host = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  void* bad[] = {&host, &P};
  tsr_status_t s = tsrLaunch(sum, stream, launch, bad, 2);
  printf("host tensor on a GPU context %d %s\n", (int)s, tsrGetLastError());
  STEP(tsrStreamDestroy(stream));
  STEP(tsrFree(ctx, x));
  STEP(tsrUnloadModule(mod));
  STEP(tsrDestroyContext(ctx));
  return 0;
}
