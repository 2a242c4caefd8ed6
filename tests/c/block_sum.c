/* block_sum from C: the README's kernel on n floats read from a file; the partial sums are
   written to another. Usage: block_sum IN OUT THREADS */
#include <stdio.h>
#include <stdlib.h>

#include "blocksum.h"

#define CHECK(call)                                                         \
  do {                                                                      \
    tsr_status_t s_ = (call);                                               \
    if (s_ != TSR_SUCCESS) {                                                \
      fprintf(stderr, "%s -> %d: %s\n", #call, (int)s_, tsrGetLastError()); \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  int64_t n = ftell(f) / 4;
  fseek(f, 0, SEEK_SET);
  float* x = malloc((size_t)n * 4 + 4);
  if (fread(x, 4, (size_t)n, f) != (size_t)n) return 2;
  fclose(f);
  int64_t groups = (n + 255) / 256;
  float* partial = calloc((size_t)groups + 1, 4);

  tsr_context_desc_t desc = {kDLCPU, 0, atoi(argv[3])};
  tsr_context_t ctx;
  CHECK(tsrCreateContextEx(&desc, &ctx));
  tsr_module_t mod;
  CHECK(tsrLoadModule(ctx, &blocksum_image, sizeof blocksum_image, &mod));
  tsr_kernel_t k;
  CHECK(tsrGetKernel(mod, "block_sum", &k));

  tsr_tensor_t X = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  tsr_tensor_t P = {partial, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &groups, NULL, 0};
  void* args[] = {&X, &P};
  tsr_launch_t launch = {(uint32_t)groups, 1, 1, 0, 0, 0, 0};
  CHECK(tsrLaunch(k, NULL, launch, args, 2));

  f = fopen(argv[2], "wb");
  fwrite(partial, 4, (size_t)groups, f);
  fclose(f);
  CHECK(tsrUnloadModule(mod));
  CHECK(tsrDestroyContext(ctx));
  return 0;
}
