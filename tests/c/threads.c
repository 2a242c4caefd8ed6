/* Launches from 8 host threads at once into one context, module and kernel: each thread
   runs axpy 50 times on its own arrays and checks every result. Prints "ok ..." */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "testmod.h"

#define THREADS 8
#define LAUNCHES 50
#define N 4099

static tsr_kernel_t kernel;
static int failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void* run(void* arg) {
  int id = (int)(intptr_t)arg;
  float* x = malloc(N * sizeof(float));
  float* y = malloc(N * sizeof(float));
  int64_t n = N;
  for (int i = 0; i < N; i++) x[i] = (float)(i % 13), y[i] = (float)id;
  tsr_tensor_t X = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  tsr_tensor_t Y = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
  float a = 1.0f;
  void* args[] = {&a, &X, &Y};
  tsr_launch_t launch = {N, 1, 1, 0, 0, 0, 0};
  int bad = 0;
  for (int l = 0; l < LAUNCHES; l++) {
    if (tsrLaunch(kernel, NULL, launch, args, 3) != TSR_SUCCESS) bad++;
  }
  for (int i = 0; i < N; i++)
    if (y[i] != (float)id + LAUNCHES * (float)(i % 13)) bad++;
  pthread_mutex_lock(&lock);
  failures += bad;
  pthread_mutex_unlock(&lock);
  free(x);
  free(y);
  return NULL;
}

int main(void) {
  tsr_context_desc_t desc = {kDLCPU, 0, 4};
  tsr_context_t ctx;
  tsr_module_t mod;
  if (tsrCreateContextEx(&desc, &ctx) || tsrLoadModule(ctx, &testmod_image,
                                                       sizeof testmod_image, &mod) ||
      tsrGetKernel(mod, "axpy", &kernel)) {
    fprintf(stderr, "%s\n", tsrGetLastError());
    return 1;
  }
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, run, (void*)(intptr_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  tsrUnloadModule(mod);
  tsrDestroyContext(ctx);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok %d threads x %d launches\n", THREADS, LAUNCHES);
  return 0;
}
