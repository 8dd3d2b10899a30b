/* Plexus SDK: tensors cross the boundary as DLPack DLTensor views.
 * A view never transfers ownership: memory stays with whoever allocated it (the host's
 * allocator for activations and parameters) and is freed by that side. */
#ifndef PLEXUS_TENSOR_H
#define PLEXUS_TENSOR_H

#include <dlpack/dlpack.h>

#include "plexus/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PLX_MAX_DIMS 8

/* The shape and element type of a tensor that does not exist yet (e.g. a layer's output
 * before the host allocates it). Plain value struct: frozen, never extended. */
typedef struct plx_tensor_desc {
  uint32_t ndim;
  DLDataType dtype;
  int64_t dims[PLX_MAX_DIMS];
} plx_tensor_desc;

/* Bit of a device-type mask, as used by components that declare the devices they run on. */
#define PLX_DEVICE_BIT(device_type) (((uint64_t)1) << (uint32_t)(device_type))

static inline DLDataType plx_dtype(uint8_t code, uint8_t bits) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}
static inline DLDataType plx_dtype_f32(void) { return plx_dtype((uint8_t)kDLFloat, 32); }
static inline DLDataType plx_dtype_f64(void) { return plx_dtype((uint8_t)kDLFloat, 64); }
static inline DLDataType plx_dtype_bf16(void) { return plx_dtype((uint8_t)kDLBfloat, 16); }
static inline DLDataType plx_dtype_i32(void) { return plx_dtype((uint8_t)kDLInt, 32); }
static inline DLDataType plx_dtype_i64(void) { return plx_dtype((uint8_t)kDLInt, 64); }
static inline int plx_dtype_equal(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static inline int64_t plx_numel(const DLTensor* t) {
  int64_t n = 1;
  int i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}
/* Row-major contiguous: strides NULL (DLPack's convention) or equal to the compact strides. */
static inline int plx_is_contiguous(const DLTensor* t) {
  int64_t expected = 1;
  int i;
  if (t->strides == NULL) return 1;
  for (i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}
/* First element, with byte_offset applied. */
static inline void* plx_data(const DLTensor* t) { return (char*)t->data + t->byte_offset; }

/* DLPack's structs are part of this ABI; pin the layout of the DLPack that was released with it
 * (DLTensor is unchanged from DLPack 0.6 to 1.x). */
PLX_PIN_SIZE(DLDevice, 8);
PLX_PIN_SIZE(DLDataType, 4);
PLX_PIN_SIZE(DLTensor, 48);
PLX_PIN_OFFSET(DLTensor, shape, 24);
PLX_PIN_OFFSET(DLTensor, byte_offset, 40);
PLX_PIN_SIZE(plx_tensor_desc, 72);

#ifdef __cplusplus
}
#endif
#endif /* PLEXUS_TENSOR_H */
