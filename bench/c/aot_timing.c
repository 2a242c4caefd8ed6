/* Times launches from C for bench/aot.py: `count` tsrLaunch calls in a loop, so the
   ctypes call that starts the loop is spread over them. Returns the seconds taken, or a
   negative status if a launch failed. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "tessera_rt.h"

double tsr_bench_launches(tsr_kernel_t k, const tsr_launch_t* launch, void** args, size_t nargs,
                          int count) {
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < count; i++) {
    tsr_status_t status = tsrLaunch(k, NULL, *launch, args, nargs);
    if (status != TSR_SUCCESS) return -(double)status;
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  return (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) * 1e-9;
}
