/* tessera_rt.c: Tessera's embeddable runtime (tessera_rt.h; ABI.md). C99 + POSIX threads.
 *
 *   cc -O2 -c tessera_rt.c && cc app.c tessera_rt.o <name>.c <name>_cpu.o -lpthread -ldl
 *
 * Loads module images (a serialized .tsrm, or a linked tsr_image_t with CPU entry points),
 * checks launches with the rules and messages of a Python launch, and runs them: on the
 * CPU as chunks of the groups over a thread pool, on a GPU through the CUDA driver, which
 * is opened with dlopen (tessera_rt_cuda.inc; no CUDA headers, no link-time libcuda).
 */
#define _GNU_SOURCE
#include "tessera_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define TSR_THREAD_LOCAL _Thread_local
#else
#define TSR_THREAD_LOCAL __thread
#endif

/* ------------------------------------------------------------------ errors */
static TSR_THREAD_LOCAL char last_error[1024];

static tsr_status_t fail(tsr_status_t status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

const char* tsrGetLastError(void) { return last_error; }

void tsrGetVersion(uint32_t* major, uint32_t* minor) {
  if (major) *major = TSR_ABI_MAJOR;
  if (minor) *minor = TSR_ABI_MINOR;
}

/* ------------------------------------------------------------------ structures */
enum { SLOT_PTR = 1, SLOT_I64, SLOT_I32, SLOT_I16, SLOT_I8, SLOT_F32, SLOT_F64, SLOT_B1 };
enum { TARGET_CPU = 0, TARGET_CUDA = 1 };
enum { LAYOUT_CONTIGUOUS = 0, LAYOUT_STRIDED = 1 };

typedef struct {
  uint8_t target, layout;
  const char* arch;
  const char* entry;
  int32_t blob;
  uint32_t entry_index, threads, nslots, nalign;
  const uint8_t* slots;
  uint32_t* align;
  tsr_cpu_entry_t cpu;
  uint32_t shared; /* CUDA: the dynamic shared bytes its code takes (tiles, staging) */
  void* cumodule;   /* CUDA: the CUmodule and CUfunction, once loaded */
  void* function;
  uint32_t shared_optin; /* dynamic shared bytes the function has been opted in to */
} spec_t;

struct tsr_kernel {
  struct tsr_module* module;
  tsr_kernel_info_t info;
  tsr_param_info_t* params;
  const char** symbols;
  int32_t dynamic_arg;
  uint32_t dynamic_itemsize, nspecs;
  spec_t* specs;
};

typedef struct {
  const char* arch;
  uint32_t kind; /* 0 cubin, 1 PTX */
  uint32_t size;
  const unsigned char* data;
} blob_t;

struct tsr_module {
  tsr_context_t ctx;
  unsigned char* bytes; /* our copy of the serialized module */
  const char* name;
  uint32_t nkernels, nblobs;
  struct tsr_kernel* kernels;
  blob_t* blobs;
  pthread_mutex_t lock;
};

typedef struct allocation {
  void* ptr;
  uint32_t flags;
  struct allocation* next;
} allocation_t;

typedef struct pool pool_t;

struct tsr_context {
  int32_t device_type, device_id, threads;
  pool_t* pool;
  void* cuda_ctx; /* the device's primary CUcontext */
  int cc_major, cc_minor;
  uint32_t shared_optin_limit;
  pthread_mutex_t lock;
  allocation_t* allocations;
};

struct tsr_stream {
  tsr_context_t ctx;
  void* cuda_stream;
};

#include "tessera_rt_cuda.inc"

/* ------------------------------------------------------------------ the CPU thread pool */
struct pool {
  int nthreads; /* the caller included */
  pthread_t* workers;
  pthread_mutex_t mu, launch_mu;
  pthread_cond_t work, done;
  tsr_cpu_entry_t fn;
  const tsr_slot_t* slots;
  int64_t nchunks, next, finished, failed_chunk;
  int32_t status;
  uint64_t generation;
  int stop;
};

static void run_chunks(pool_t* p) { /* called with p->mu held; returns with it held */
  while (p->next < p->nchunks) {
    int64_t c = p->next++;
    tsr_cpu_entry_t fn = p->fn;
    const tsr_slot_t* slots = p->slots;
    int64_t n = p->nchunks;
    pthread_mutex_unlock(&p->mu);
    int32_t status = fn(slots, c, n);
    pthread_mutex_lock(&p->mu);
    if (status != 0 && p->status == 0) {
      p->status = status;
      p->failed_chunk = c;
    }
    if (++p->finished == p->nchunks) pthread_cond_broadcast(&p->done);
  }
}

static void* worker(void* arg) {
  pool_t* p = (pool_t*)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    run_chunks(p);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void pool_destroy(pool_t* p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->workers[i], NULL);
  free(p->workers);
  free(p);
}

static pool_t* pool_create(int nthreads) {
  pool_t* p = (pool_t*)calloc(1, sizeof *p);
  if (!p) return NULL;
  p->nthreads = nthreads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->launch_mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->workers = (pthread_t*)calloc(nthreads > 1 ? nthreads - 1 : 1, sizeof(pthread_t));
  if (!p->workers) {
    free(p);
    return NULL;
  }
  for (int i = 0; i < nthreads - 1; i++) {
    if (pthread_create(&p->workers[i], NULL, worker, p) != 0) {
      p->nthreads = i + 1;
      pool_destroy(p);
      return NULL;
    }
  }
  return p;
}

/* Runs chunks 0..nchunks-1 of fn; one launch at a time per context. */
static int32_t pool_run(pool_t* p, tsr_cpu_entry_t fn, const tsr_slot_t* slots, int64_t nchunks,
                        int64_t* failed_chunk) {
  if (p->nthreads == 1 || nchunks == 1) {
    for (int64_t c = 0; c < nchunks; c++) {
      int32_t status = fn(slots, c, nchunks);
      if (status != 0) {
        *failed_chunk = c;
        return status;
      }
    }
    return 0;
  }
  pthread_mutex_lock(&p->launch_mu);
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->slots = slots;
  p->nchunks = nchunks;
  p->next = p->finished = 0;
  p->status = 0;
  p->generation++;
  pthread_cond_broadcast(&p->work);
  run_chunks(p);
  while (p->finished < p->nchunks) pthread_cond_wait(&p->done, &p->mu);
  int32_t status = p->status;
  *failed_chunk = p->failed_chunk;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->launch_mu);
  return status;
}

/* ------------------------------------------------------------------ contexts */
static int default_threads(void) {
  const char* env = getenv("TSR_NUM_THREADS");
  if (env && *env) {
    int n = atoi(env);
    if (n > 0) return n;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

tsr_status_t tsrCreateContextEx(const tsr_context_desc_t* desc, tsr_context_t* out) {
  if (!desc || !out) return fail(TSR_EINVAL, "tsrCreateContextEx: desc and ctx must not be NULL");
  *out = NULL;
  if (desc->device_type != kDLCPU && desc->device_type != kDLCUDA)
    return fail(TSR_EINVAL, "tsrCreateContextEx: device_type %d is neither kDLCPU (1) nor "
                "kDLCUDA (2)", (int)desc->device_type);
  if (desc->threads < 0) return fail(TSR_EINVAL, "tsrCreateContextEx: threads=%d", desc->threads);
  tsr_context_t ctx = (tsr_context_t)calloc(1, sizeof *ctx);
  if (!ctx) return fail(TSR_EOOM, "tsrCreateContextEx: out of memory (%zu bytes)", sizeof *ctx);
  ctx->device_type = desc->device_type;
  ctx->device_id = desc->device_id;
  pthread_mutex_init(&ctx->lock, NULL);
  if (desc->device_type == kDLCPU) {
    ctx->threads = desc->threads ? desc->threads : default_threads();
    ctx->pool = pool_create(ctx->threads);
    if (!ctx->pool) {
      int threads = ctx->threads;
      free(ctx);
      return fail(TSR_EOOM, "tsrCreateContextEx: cannot start %d threads", threads);
    }
    return *out = ctx, TSR_SUCCESS;
  }
  tsr_status_t status = cuda_context_open(ctx);
  if (status != TSR_SUCCESS) {
    free(ctx);
    return status;
  }
  return *out = ctx, TSR_SUCCESS;
}

tsr_status_t tsrCreateContext(tsr_context_t* out) {
  tsr_context_desc_t desc = {kDLCPU, 0, 0};
  const char* device = getenv("TSR_DEVICE");
  if (device && *device && strcmp(device, "cpu") != 0) {
    int id = 0;
    if (strcmp(device, "cuda") == 0 || sscanf(device, "cuda:%d", &id) == 1) {
      desc.device_type = kDLCUDA;
      desc.device_id = id;
    } else {
      return fail(TSR_EINVAL, "TSR_DEVICE=%s: use cpu, cuda or cuda:N", device);
    }
  }
  return tsrCreateContextEx(&desc, out);
}

tsr_status_t tsrDestroyContext(tsr_context_t ctx) {
  if (!ctx) return fail(TSR_EINVAL, "tsrDestroyContext: ctx is NULL");
  pool_destroy(ctx->pool);
  while (ctx->allocations) tsrFree(ctx, ctx->allocations->ptr);
  if (ctx->device_type == kDLCUDA) cuda_context_close(ctx);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
  return TSR_SUCCESS;
}

/* ------------------------------------------------------------------ memory */
tsr_status_t tsrAlloc(tsr_context_t ctx, size_t bytes, uint32_t flags, void** dptr) {
  if (!ctx || !dptr) return fail(TSR_EINVAL, "tsrAlloc: ctx and dptr must not be NULL");
  if (flags > TSR_MEM_PINNED) return fail(TSR_EINVAL, "tsrAlloc: unknown flags %u", flags);
  *dptr = NULL;
  allocation_t* a = (allocation_t*)malloc(sizeof *a);
  if (!a) return fail(TSR_EOOM, "tsrAlloc: out of memory");
  void* p = NULL;
  if (ctx->device_type == kDLCUDA && flags != TSR_MEM_HOST) {
    tsr_status_t status = cuda_alloc(ctx, bytes, flags, &p);
    if (status != TSR_SUCCESS) {
      free(a);
      return status;
    }
  } else if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) {
    free(a);
    return fail(TSR_EOOM, "tsrAlloc: cannot allocate %zu bytes of host memory", bytes);
  }
  a->ptr = p;
  a->flags = ctx->device_type == kDLCUDA ? flags : TSR_MEM_HOST;
  pthread_mutex_lock(&ctx->lock);
  a->next = ctx->allocations;
  ctx->allocations = a;
  pthread_mutex_unlock(&ctx->lock);
  *dptr = p;
  return TSR_SUCCESS;
}

tsr_status_t tsrFree(tsr_context_t ctx, void* dptr) {
  if (!ctx) return fail(TSR_EINVAL, "tsrFree: ctx is NULL");
  if (!dptr) return TSR_SUCCESS;
  pthread_mutex_lock(&ctx->lock);
  allocation_t** at = &ctx->allocations;
  while (*at && (*at)->ptr != dptr) at = &(*at)->next;
  allocation_t* a = *at;
  if (a) *at = a->next;
  pthread_mutex_unlock(&ctx->lock);
  if (!a) return fail(TSR_EINVAL, "tsrFree: %p was not allocated by tsrAlloc on this context",
                      dptr);
  if (a->flags == TSR_MEM_HOST) free(a->ptr);
  else cuda_free(ctx, a->ptr, a->flags);
  free(a);
  return TSR_SUCCESS;
}

tsr_status_t tsrMemcpy(tsr_context_t ctx, void* dst, const void* src, size_t bytes,
                       tsr_stream_t stream) {
  if (!ctx) return fail(TSR_EINVAL, "tsrMemcpy: ctx is NULL");
  if (bytes && (!dst || !src)) return fail(TSR_EINVAL, "tsrMemcpy: dst or src is NULL");
  if (ctx->device_type == kDLCUDA) return cuda_memcpy(ctx, dst, src, bytes, stream);
  if (bytes) memmove(dst, src, bytes);
  return TSR_SUCCESS;
}

/* ------------------------------------------------------------------ streams */
tsr_status_t tsrStreamCreate(tsr_context_t ctx, tsr_stream_t* out) {
  if (!ctx || !out) return fail(TSR_EINVAL, "tsrStreamCreate: ctx and stream must not be NULL");
  tsr_stream_t s = (tsr_stream_t)calloc(1, sizeof *s);
  if (!s) return fail(TSR_EOOM, "tsrStreamCreate: out of memory");
  s->ctx = ctx;
  if (ctx->device_type == kDLCUDA) {
    tsr_status_t status = cuda_stream_create(ctx, &s->cuda_stream);
    if (status != TSR_SUCCESS) {
      free(s);
      return status;
    }
  }
  return *out = s, TSR_SUCCESS;
}

tsr_status_t tsrStreamSynchronize(tsr_stream_t s, uint32_t timeout_ms) {
  if (!s) return fail(TSR_EINVAL, "tsrStreamSynchronize: stream is NULL (synchronize a stream "
                      "made by tsrStreamCreate)");
  if (s->ctx->device_type != kDLCUDA) return TSR_SUCCESS; /* CPU work is done on return */
  return cuda_stream_synchronize(s->ctx, s->cuda_stream, timeout_ms);
}

tsr_status_t tsrStreamDestroy(tsr_stream_t s) {
  if (!s) return fail(TSR_EINVAL, "tsrStreamDestroy: stream is NULL");
  if (s->ctx->device_type == kDLCUDA) cuda_stream_destroy(s->ctx, s->cuda_stream);
  free(s);
  return TSR_SUCCESS;
}

#include "tessera_rt_module.inc"
#include "tessera_rt_launch.inc"
