/* A test driver: one tsrLaunch of a kernel of a linked module ("testmod", or the one
 * MODULE_HEADER and MODULE_IMAGE name), its arguments from the command line, on a CPU
 * context (or a GPU's with --cuda: tensors are copied to device memory and back).
 *
 *   launch [--patch-major N] [--truncate BYTES] [--serialized] [--nargs N] [--launches N]
 *          [--cuda] [--time N] KERNEL THREADS GX GY GZ BX BY BZ ARG...
 *
 * An ARG is a tensor "t:CODE:BITS:FILE:D0xD1...[:S0xS1...]" (DLPack type code and bits,
 * its elements in FILE, read before and written back after the launch; strides in
 * elements, optional), a scalar "i8:V", "i16:V", "i32:V", "i64:V", "u8:V", "u32:V",
 * "f32:V", "f64:V", "h:BITS" (a 16-bit float's bits), or "null". Prints "status N" and, on
 * failure, the message on the next line; exits 0 when the driver itself worked. --time N
 * then makes N more launches and prints "us_per_launch X" (enqueue to finish, averaged).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MODULE_HEADER
#define MODULE_HEADER "testmod.h"
#define MODULE_IMAGE testmod_image
#endif
#include MODULE_HEADER

typedef struct {
  tsr_tensor_t t;
  int64_t shape[8], strides[8];
  char path[512];
  size_t bytes;
  union {
    int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint16_t u16; uint32_t u32;
    float f32; double f64;
  } scalar;
  int is_tensor, is_null;
} arg_t;

static int parse_dims(const char* s, int64_t* out) {
  int n = 0;
  while (*s && n < 8) {
    out[n++] = strtoll(s, (char**)&s, 10);
    if (*s == 'x') s++;
  }
  return n;
}

static int parse_arg(const char* text, arg_t* a) {
  memset(a, 0, sizeof *a);
  if (strcmp(text, "null") == 0) return a->is_null = 1;
  if (strncmp(text, "t:", 2) == 0) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text + 2);
    char* code = strtok(buf, ":");
    char* bits = strtok(NULL, ":");
    char* path = strtok(NULL, ":");
    char* dims = strtok(NULL, ":");
    char* strides = strtok(NULL, ":");
    if (!code || !bits || !path || !dims) return 0;
    a->is_tensor = 1;
    a->t.dtype.code = (uint8_t)atoi(code);
    a->t.dtype.bits = (uint8_t)atoi(bits);
    a->t.dtype.lanes = 1;
    a->t.device.device_type = kDLCPU;
    snprintf(a->path, sizeof a->path, "%s", path);
    a->t.ndim = strcmp(dims, "-") == 0 ? 0 : parse_dims(dims, a->shape);
    a->t.shape = a->shape;
    if (strides) {
      parse_dims(strides, a->strides);
      a->t.strides = a->strides;
    }
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    a->bytes = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    a->t.data = malloc(a->bytes + 64);
    if (a->bytes && fread(a->t.data, 1, a->bytes, f) != a->bytes) return 0;
    fclose(f);
    return 1;
  }
  const char* v = strchr(text, ':');
  if (!v) return 0;
  v++;
  if (!strncmp(text, "i8:", 3)) a->scalar.i8 = (int8_t)atoi(v);
  else if (!strncmp(text, "i16:", 4)) a->scalar.i16 = (int16_t)atoi(v);
  else if (!strncmp(text, "i32:", 4)) a->scalar.i32 = atoi(v);
  else if (!strncmp(text, "i64:", 4)) a->scalar.i64 = strtoll(v, NULL, 10);
  else if (!strncmp(text, "u8:", 3)) a->scalar.u8 = (uint8_t)atoi(v);
  else if (!strncmp(text, "u32:", 4)) a->scalar.u32 = (uint32_t)strtoul(v, NULL, 10);
  else if (!strncmp(text, "f32:", 4)) a->scalar.f32 = strtof(v, NULL);
  else if (!strncmp(text, "f64:", 4)) a->scalar.f64 = strtod(v, NULL);
  else if (!strncmp(text, "h:", 2)) a->scalar.u16 = (uint16_t)strtoul(v, NULL, 0);
  else return 0;
  return 1;
}

int main(int argc, char** argv) {
  int patch_major = -1, truncate = -1, serialized = 0, launches = 1, on_gpu = 0, timed = 0;
  long nargs_override = -1;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
    if (!strcmp(argv[i], "--patch-major")) patch_major = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--truncate")) truncate = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--nargs")) nargs_override = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--launches")) launches = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--time")) timed = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--serialized")) serialized = 1, i--;
    else if (!strcmp(argv[i], "--cuda")) on_gpu = 1, i--;
  }
  if (argc - i < 8) return 2;
  const char* kernel = argv[i];
  tsr_context_desc_t desc = {kDLCPU, 0, atoi(argv[i + 1])};
  if (on_gpu) desc.device_type = kDLCUDA, desc.threads = 0;
  tsr_launch_t launch = {(uint32_t)atol(argv[i + 2]), (uint32_t)atol(argv[i + 3]),
                         (uint32_t)atol(argv[i + 4]), (uint32_t)atol(argv[i + 5]),
                         (uint32_t)atol(argv[i + 6]), (uint32_t)atol(argv[i + 7]), 0};
  int nargs = argc - i - 8;
  arg_t* args = calloc((size_t)nargs + 1, sizeof *args);
  void** pointers = calloc((size_t)nargs + 1, sizeof *pointers);
  for (int a = 0; a < nargs; a++) {
    if (!parse_arg(argv[i + 8 + a], &args[a])) return 3;
    pointers[a] = args[a].is_null ? NULL : args[a].is_tensor ? (void*)&args[a].t
                                                              : (void*)&args[a].scalar;
  }
  tsr_image_t image = MODULE_IMAGE;
  unsigned char* bytes = malloc(image.size);
  memcpy(bytes, image.bytes, image.size);
  if (patch_major >= 0) bytes[4] = (unsigned char)patch_major;
  image.bytes = bytes;
  if (truncate >= 0) image.size = (size_t)truncate;

  tsr_context_t ctx;
  tsr_module_t mod;
  tsr_kernel_t k;
  tsr_status_t s = tsrCreateContextEx(&desc, &ctx);
  tsr_stream_t st = NULL; /* on a GPU: every copy and launch, in order */
  if (s == TSR_SUCCESS && on_gpu) s = tsrStreamCreate(ctx, &st);
  void* host[64] = {0};
  for (int a = 0; a < nargs && a < 64 && on_gpu && s == TSR_SUCCESS; a++) {
    if (!args[a].is_tensor) continue;
    void* device = NULL;
    s = tsrAlloc(ctx, args[a].bytes, TSR_MEM_DEVICE, &device);
    if (s == TSR_SUCCESS) s = tsrMemcpy(ctx, device, args[a].t.data, args[a].bytes, st);
    host[a] = args[a].t.data;
    args[a].t.data = device;
    args[a].t.device.device_type = kDLCUDA;
  }
  if (s == TSR_SUCCESS)
    s = serialized ? tsrLoadModule(ctx, image.bytes, image.size, &mod)
                   : tsrLoadModule(ctx, &image, sizeof image, &mod);
  if (s == TSR_SUCCESS) s = tsrGetKernel(mod, kernel, &k);
  for (int n = 0; n < launches && s == TSR_SUCCESS; n++)
    s = tsrLaunch(k, st, launch, pointers, nargs_override >= 0 ? (size_t)nargs_override
                                                              : (size_t)nargs);
  for (int a = 0; a < nargs && a < 64 && on_gpu && s == TSR_SUCCESS; a++)
    if (args[a].is_tensor) s = tsrMemcpy(ctx, host[a], args[a].t.data, args[a].bytes, st);
  if (s == TSR_SUCCESS && on_gpu) s = tsrStreamSynchronize(st, 60000);
  printf("status %d\n%s\n", (int)s, s == TSR_SUCCESS ? "" : tsrGetLastError());
  if (s == TSR_SUCCESS && timed > 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int n = 0; n < timed && s == TSR_SUCCESS; n++)
      s = tsrLaunch(k, st, launch, pointers, (size_t)nargs);
    if (s == TSR_SUCCESS && on_gpu) s = tsrStreamSynchronize(st, 60000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("us_per_launch %.3f status %d\n", ns / 1e3 / timed, (int)s);
  }
  for (int a = 0; a < nargs && a < 64 && on_gpu; a++)
    if (args[a].is_tensor) args[a].t.data = host[a];
  for (int a = 0; a < nargs; a++) {
    if (!args[a].is_tensor) continue;
    FILE* f = fopen(args[a].path, "wb");
    fwrite(args[a].t.data, 1, args[a].bytes, f);
    fclose(f);
  }
  return 0;
}
