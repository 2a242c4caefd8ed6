/* dlpack.h: the DLPack tensor description, as Tessera's C runtime takes it.
 *
 * The structures and values below follow the DLPack ABI (version 1.x: DLDevice,
 * DLDataType, DLTensor), so a tensor from any DLPack producer can be passed as it is.
 * A program that already includes the reference dlpack.h may include it instead:
 * this file defines nothing when DLPACK_VERSION is already defined. C99.
 */
#ifndef DLPACK_VERSION
#ifndef TESSERA_DLPACK_H
#define TESSERA_DLPACK_H

#include <stdint.h>

#define DLPACK_VERSION 100

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  kDLCPU = 1,     /* host memory */
  kDLCUDA = 2,    /* CUDA device memory */
  kDLCUDAHost = 3 /* pinned host memory (cudaMallocHost) */
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e4m3fn = 10, /* Tessera's f8e4m3 */
  kDLFloat8_e5m2 = 12    /* Tessera's f8e5m2 */
} DLDataTypeCode;

typedef struct {
  uint8_t code;  /* a DLDataTypeCode */
  uint8_t bits;  /* bits of one lane */
  uint16_t lanes; /* 1 for the scalars of a tensor */
} DLDataType;

typedef struct {
  void* data;           /* where the allocation starts (see byte_offset) */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;       /* ndim extents */
  int64_t* strides;     /* ndim strides in elements; NULL: C-contiguous */
  uint64_t byte_offset; /* the first element is at (char*)data + byte_offset */
} DLTensor;

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_DLPACK_H */
#endif /* DLPACK_VERSION */
