/* Plexus SDK: versioning, status codes and the conventions every other header follows.
 *
 * The boundary between the Plexus host and a plugin is C99: plain structs, fixed-width
 * integers and function pointers. Two rules make it extensible without breaking old builds:
 *   1. Every extensible struct starts with `uint32_t struct_size`. The side that fills a struct
 *      sets it to sizeof() of the layout it was compiled with; the side that reads it reads
 *      only the fields that lie inside struct_size (PLX_HAS_FIELD). Tables only grow at the end.
 *   2. A struct that a callee fills for the caller ("out" struct) is sized by the caller: the
 *      caller sets struct_size, the callee writes only fields inside it.
 * See docs/abi.md for what may change in a minor version. */
#ifndef PLEXUS_ABI_H
#define PLEXUS_ABI_H

#include <stddef.h>
#include <stdint.h>

#define PLX_ABI_MAJOR 1
#define PLX_ABI_MINOR 10
#define PLX_MAKE_VERSION(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor)&0xFFFFu))
#define PLX_VERSION_MAJOR(version) ((uint32_t)(version) >> 16)
#define PLX_VERSION_MINOR(version) ((uint32_t)(version)&0xFFFFu)
#define PLX_ABI_VERSION PLX_MAKE_VERSION(PLX_ABI_MAJOR, PLX_ABI_MINOR)

#ifdef __cplusplus
#define PLX_EXTERN_C extern "C"
#define PLX_NOEXCEPT noexcept
#else
#define PLX_EXTERN_C
#define PLX_NOEXCEPT
#endif

#if defined(_WIN32)
#define PLX_EXPORT __declspec(dllexport)
#else
#define PLX_EXPORT __attribute__((visibility("default")))
#endif

/* ---- Status codes ------------------------------------------------------------------------
 * Every fallible call returns one. Before returning anything but PLX_OK, the callee hands a
 * full message to the host with plx_host_api.set_error (the C++ helpers do this for you). */
typedef int32_t plx_status;
#define PLX_OK 0
#define PLX_ERR_INVALID_ARGUMENT 1 /* a bad value, shape, dtype or config from the caller */
#define PLX_ERR_OUT_OF_MEMORY 2
#define PLX_ERR_UNSUPPORTED 3 /* the call, device or dtype is not implemented here */
#define PLX_ERR_NOT_FOUND 4   /* a named thing (config key, group, component) does not exist */
#define PLX_ERR_VERSION 5     /* incompatible ABI or table version */
#define PLX_ERR_INTERNAL 6    /* an unexpected failure inside the callee */
#define PLX_ERR_COMM 7        /* a communication failure, including a dead peer */
#define PLX_ERR_TIMEOUT 8
#define PLX_ERR_NUMERIC 9 /* non-finite values where finite ones were required */
#define PLX_ERR_IO 10
#define PLX_STATUS_COUNT 11

static inline const char* plx_status_name(plx_status status) {
  switch (status) {
    case PLX_OK:
      return "ok";
    case PLX_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case PLX_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case PLX_ERR_UNSUPPORTED:
      return "unsupported";
    case PLX_ERR_NOT_FOUND:
      return "not found";
    case PLX_ERR_VERSION:
      return "version mismatch";
    case PLX_ERR_INTERNAL:
      return "internal error";
    case PLX_ERR_COMM:
      return "communication error";
    case PLX_ERR_TIMEOUT:
      return "timeout";
    case PLX_ERR_NUMERIC:
      return "non-finite value";
    case PLX_ERR_IO:
      return "i/o error";
    default:
      return "unknown status";
  }
}

/* ---- Extensible-struct helpers ------------------------------------------------------------ */
#define PLX_FIELD_END(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))
/* True when the struct at `ptr` (whose declared type is `type`) was built with `field`. */
#define PLX_HAS_FIELD(ptr, type, field) ((ptr)->struct_size >= PLX_FIELD_END(type, field))
/* The function pointer `field` of a table, or NULL when the table's builder did not know it. */
#define PLX_TABLE_FN(ptr, type, field) (PLX_HAS_FIELD(ptr, type, field) ? (ptr)->field : NULL)

/* Compile-time layout pins. C99 has no _Static_assert, so a negative array size fails the build. */
#ifdef __cplusplus
#define PLX_STATIC_ASSERT(cond, name) static_assert(cond, #name)
#else
#define PLX_STATIC_ASSERT(cond, name) typedef char plx_static_assert_##name[(cond) ? 1 : -1]
#endif
/* Layouts are pinned for LP64 targets (Linux x86-64, aarch64), the platforms Plexus supports. */
#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
#define PLX_LP64 1
#define PLX_PIN_OFFSET(type, field, offset) \
  PLX_STATIC_ASSERT(offsetof(type, field) == (offset), type##_##field##_offset)
#define PLX_PIN_SIZE(type, size) PLX_STATIC_ASSERT(sizeof(type) == (size), type##_size)
#else
#define PLX_PIN_OFFSET(type, field, offset)
#define PLX_PIN_SIZE(type, size)
#endif

#endif /* PLEXUS_ABI_H */
