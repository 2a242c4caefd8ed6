/* tessera_rt.h: Tessera's embeddable runtime, a C ABI for ahead-of-time kernel modules.
 *
 * Build tessera_rt.c with any C99 compiler and link -lpthread -ldl. Modules are made in
 * Python by tessera.aot (docs/embedding.md). The names, signatures and status values of
 * seed 004 §3.5 are kept; the rest is Tessera's addition (ABI.md).
 *
 * Every call returns a tsr_status_t; on failure tsrGetLastError() gives this thread's
 * message. Contexts, modules and kernels may be used from several threads at once.
 */
#ifndef TESSERA_RT_H
#define TESSERA_RT_H

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_ABI_MAJOR 1
#define TSR_ABI_MINOR 0

typedef enum {
  TSR_SUCCESS = 0,
  TSR_EOOM,        /* out of memory (the message names the size) */
  TSR_EINVAL,      /* a bad argument, launch or image; nothing ran */
  TSR_ETIMEOUT,    /* a stream did not finish by its deadline */
  TSR_EVERSION,    /* a module built for another TSR ABI */
  TSR_ENOTFOUND,   /* no kernel of that name (the message lists the module's) */
  TSR_EDEVICE,     /* the device, its driver, or code for it is missing or failed */
  TSR_EUNSUPPORTED /* not possible on this context (e.g. CUDA code on a CPU context) */
} tsr_status_t;

typedef struct tsr_context* tsr_context_t;
typedef struct tsr_module* tsr_module_t;
typedef struct tsr_kernel* tsr_kernel_t;
typedef struct tsr_stream* tsr_stream_t;

/* A tensor argument: DLPack's DLTensor (strides in elements; NULL: C-contiguous). */
typedef DLTensor tsr_tensor_t;

typedef struct {
  int32_t device_type; /* kDLCPU or kDLCUDA */
  int32_t device_id;   /* the GPU's ordinal for kDLCUDA */
  int32_t threads;     /* CPU: worker threads (0: TSR_NUM_THREADS, else the cores) */
} tsr_context_desc_t;

typedef struct {
  uint32_t grid_x, grid_y, grid_z;    /* groups along each axis (Python's k[grid]); y, z:
                                         0 means 1 */
  uint32_t block_x, block_y, block_z; /* the kernel's tile= shape, or 0: the image's */
  uint32_t smem_bytes;                /* dynamic shared bytes, or 0: from the arguments */
} tsr_launch_t;

#define TSR_MEM_DEVICE 0u /* the context's device (host memory on a CPU context) */
#define TSR_MEM_HOST 1u   /* host memory */
#define TSR_MEM_PINNED 2u /* page-locked host memory (CUDA contexts; host memory else) */

typedef struct {
  const char* name;
  int32_t kind;          /* 0: an array (a tsr_tensor_t), 1: a scalar */
  DLDataType dtype;      /* f16, bf16 scalars: pass their 16 bits (uint16_t) */
  int32_t mut;           /* 1: the kernel writes this array */
  int32_t ndim;
  const int64_t* dims;   /* >= 0: a literal extent; -1 - k: size symbol k */
} tsr_param_info_t;

typedef struct {
  const char* name;
  int32_t nparams;                 /* what tsrLaunch takes in args[] */
  const tsr_param_info_t* params;
  int32_t nsymbols;
  const char* const* symbols;      /* the size symbols ("n", "grid_groups") */
  int32_t grouped;                 /* 1: launched in groups of tile[] lanes */
  uint32_t tile[3];
  int32_t grid_rank;               /* the grid axes the kernel reads */
  uint32_t shared_bytes;           /* its constant shared memory per group */
  const char* metadata_json;       /* seed 004 §11.2 keys: name, tile, fragments, ... */
} tsr_kernel_info_t;

/* Linked CPU code (written by tessera.aot.write_c; not for hand-written use). */
typedef union {
  void* p;
  int64_t i64;
  int32_t i32;
  int16_t i16;
  int8_t i8;
  uint8_t b1;
  float f32;
  double f64;
} tsr_slot_t;
typedef int32_t (*tsr_cpu_entry_t)(const tsr_slot_t* slots, int64_t chunk, int64_t nchunks);
typedef struct {
  char magic[4];                  /* "TSRI" */
  uint32_t abi_major;
  const unsigned char* bytes;     /* the serialized module */
  size_t size;
  const tsr_cpu_entry_t* entries; /* the CPU entry points, in the image's order */
  size_t nentries;
} tsr_image_t;

/* Contexts: one device each; a CPU context's thread pool runs launches' chunks. */
tsr_status_t tsrCreateContext(tsr_context_t* ctx); /* device from TSR_DEVICE, default cpu */
tsr_status_t tsrCreateContextEx(const tsr_context_desc_t* desc, tsr_context_t* ctx);
tsr_status_t tsrDestroyContext(tsr_context_t ctx);

/* Modules: a serialized image (.tsrm bytes) or &<name>_image (a tsr_image_t, linked). */
tsr_status_t tsrLoadModule(tsr_context_t ctx, const void* image, size_t sz, tsr_module_t* mod);
tsr_status_t tsrUnloadModule(tsr_module_t mod);
tsr_status_t tsrGetKernel(tsr_module_t mod, const char* name, tsr_kernel_t* k);
tsr_status_t tsrKernelGetInfo(tsr_kernel_t k, tsr_kernel_info_t* info);

/* Memory (aligned to 256 bytes) and copies (asynchronous on CUDA streams). */
tsr_status_t tsrAlloc(tsr_context_t ctx, size_t bytes, uint32_t flags, void** dptr);
tsr_status_t tsrFree(tsr_context_t ctx, void* dptr);
tsr_status_t tsrMemcpy(tsr_context_t ctx, void* dst, const void* src, size_t bytes,
                       tsr_stream_t stream);

/* Streams (NULL: the context's default). On a CPU context work is done on return. */
tsr_status_t tsrStreamCreate(tsr_context_t ctx, tsr_stream_t* stream);
tsr_status_t tsrStreamSynchronize(tsr_stream_t stream, uint32_t timeout_ms); /* 0: none */
tsr_status_t tsrStreamDestroy(tsr_stream_t stream);

/* args[i] points to parameter i of the kernel's signature, constexprs left out: a
   tsr_tensor_t for an array, the scalar (of its dtype) otherwise. */
tsr_status_t tsrLaunch(tsr_kernel_t k, tsr_stream_t stream, tsr_launch_t launch, void** args,
                       size_t nargs);

const char* tsrGetLastError(void); /* this thread's message for its last error */
void tsrGetVersion(uint32_t* major, uint32_t* minor);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_RT_H */
