/* A recording stand-in for libcuda.so.1 (the runtime's CUDA path without a GPU).
 *
 * It only counts and records: every call the runtime makes is appended to the file
 * FAKE_CUDA_LOG names, with its arguments (a launch: its dimensions, shared bytes and the
 * first FAKE_CUDA_NPARAMS parameters, each read as 8 bytes). Memory calls hand out host
 * memory; kernels run nowhere. The device is sm_<FAKE_CUDA_CC> (default 90).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void record(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#include <stdarg.h>
static void record(const char* fmt, ...) {
  const char* path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int cc(void) {
  const char* v = getenv("FAKE_CUDA_CC");
  return v ? atoi(v) : 90;
}

int cuInit(unsigned flags) { record("cuInit %u", flags); return 0; }
int cuDeviceGet(int* d, int ordinal) { *d = ordinal; record("cuDeviceGet %d", ordinal); return 0; }
int cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  *v = attr == 75 ? cc() / 10 : attr == 76 ? cc() % 10 : attr == 97 ? 232448 : 0;
  return 0;
}
static int primary;
int cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = &primary; record("retain %d", dev); return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { record("release %d", dev); return 0; }
int cuCtxSetCurrent(void* ctx) { return ctx == &primary ? 0 : 201; }
int cuModuleLoadData(void** module, const void* image) {
  const unsigned char* b = (const unsigned char*)image;
  int elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  record("cuModuleLoadData %s", elf ? "cubin" : strncmp((const char*)b, "//", 2) == 0 ? "ptx" : "?");
  *module = malloc(16);
  return 0;
}
int cuModuleUnload(void* module) { free(module); record("cuModuleUnload"); return 0; }
int cuModuleGetFunction(void** fn, void* module, const char* name) {
  (void)module;
  record("cuModuleGetFunction %s", name);
  *fn = strdup(name);
  return 0;
}
int cuFuncSetAttribute(void* fn, int attr, int value) {
  record("cuFuncSetAttribute %s %d %d", (const char*)fn, attr, value);
  return 0;
}
int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  (void)extra;
  const char* n = getenv("FAKE_CUDA_NPARAMS");
  int count = n ? atoi(n) : 0;
  char text[8192];
  size_t used = 0;
  for (int i = 0; i < count && used < sizeof text - 32; i++) {
    uint64_t v;
    memcpy(&v, params[i], 8);
    used += (size_t)snprintf(text + used, sizeof text - used, " %llx", (unsigned long long)v);
  }
  text[used] = 0;
  record("cuLaunchKernel %s grid %u %u %u block %u %u %u shared %u stream %s params%s",
         (const char*)fn, gx, gy, gz, bx, by, bz, shared, stream ? "own" : "default", text);
  return 0;
}
int cuStreamCreate(void** s, unsigned flags) { *s = malloc(1); record("cuStreamCreate %u", flags); return 0; }
int cuStreamDestroy_v2(void* s) { free(s); return 0; }
int cuStreamSynchronize(void* s) { (void)s; record("cuStreamSynchronize"); return 0; }
static int queries;
int cuStreamQuery(void* s) { (void)s; return getenv("FAKE_CUDA_BUSY") ? 600 : (queries++, 0); }
int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  void* m = NULL;
  if (posix_memalign(&m, 256, bytes)) return 2;
  *p = (unsigned long long)(uintptr_t)m;
  return 0;
}
int cuMemFree_v2(unsigned long long p) { free((void*)(uintptr_t)p); return 0; }
int cuMemHostAlloc(void** p, size_t bytes, unsigned flags) { (void)flags; *p = malloc(bytes); return 0; }
int cuMemFreeHost(void* p) { free(p); return 0; }
int cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t bytes, void* s) {
  (void)s;
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
int cuGetErrorString(int r, const char** text) { (void)r; *text = "fake error"; return 0; }
