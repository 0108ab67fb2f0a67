/*
 * dlpack_abi.h - our own declarations of the DLPack ABI (no dlpack.h
 * needed to build), as cuda_api.h does for CUDA.
 *
 * The struct layouts, codes and capsule names are facts of the spec
 * (https://dmlc.github.io/dlpack/latest/).  tests/test_dlpack_header.py
 * compiles tests/drivers/check_dlpack_abi.c, which includes this header
 * next to a real dlpack.h and asserts with _Static_assert that every code,
 * size, offset and field type matches: Debian's libdlpack-dev (0.6) for
 * what it has (no kDLOneAPI, no versioned struct), and a current dlpack.h
 * (1.x) where one is at hand.  Names carry an acc_ prefix so both headers
 * fit in one translation unit.
 */
#ifndef ACC_DLPACK_ABI_H
#define ACC_DLPACK_ABI_H

#include <stdint.h>

/* The version of the versioned ABI we produce. */
#define ACC_DLPACK_MAJOR_VERSION 1
#define ACC_DLPACK_MINOR_VERSION 0

/* Device types in DLPack 0.6 and later: name, value. */
#define ACC_DLPACK_DEVICE_TYPES(X) \
    X(kDLCPU, 1)                   \
    X(kDLCUDA, 2)                  \
    X(kDLCUDAHost, 3)              \
    X(kDLOpenCL, 4)                \
    X(kDLVulkan, 7)                \
    X(kDLMetal, 8)                 \
    X(kDLVPI, 9)                   \
    X(kDLROCM, 10)                 \
    X(kDLROCMHost, 11)             \
    X(kDLExtDev, 12)               \
    X(kDLCUDAManaged, 13)

/* Device types newer than 0.6 (checked against a 1.x header only). */
#define ACC_DLPACK_DEVICE_TYPES_1(X) \
    X(kDLOneAPI, 14)

/* Data type codes we read or write. */
#define ACC_DLPACK_TYPE_CODES(X) \
    X(kDLInt, 0)                 \
    X(kDLUInt, 1)                \
    X(kDLFloat, 2)               \
    X(kDLBfloat, 4)              \
    X(kDLComplex, 5)

/* Flags of DLManagedTensorVersioned (1.x). */
#define ACC_DLPACK_FLAGS(X)                     \
    X(DLPACK_FLAG_BITMASK_READ_ONLY, 1)         \
    X(DLPACK_FLAG_BITMASK_IS_COPIED, 2)

#define ACC_DLPACK_ENUM(name, value) ACC_##name = value,
enum {
    ACC_DLPACK_DEVICE_TYPES(ACC_DLPACK_ENUM)
    ACC_DLPACK_DEVICE_TYPES_1(ACC_DLPACK_ENUM)
    ACC_DLPACK_TYPE_CODES(ACC_DLPACK_ENUM)
    ACC_DLPACK_FLAGS(ACC_DLPACK_ENUM)
};
#undef ACC_DLPACK_ENUM

/* Capsule names: a consumer renames the capsule to the used_ name. */
#define ACC_DLPACK_CAPSULE "dltensor"
#define ACC_DLPACK_CAPSULE_USED "used_dltensor"
#define ACC_DLPACK_VERSIONED_CAPSULE "dltensor_versioned"
#define ACC_DLPACK_VERSIONED_CAPSULE_USED "used_dltensor_versioned"

/* DLDevice: the device type is a C enum in dlpack.h (4 bytes). */
typedef struct acc_dl_device {
    int32_t device_type;
    int32_t device_id;
} acc_dl_device;

typedef struct acc_dl_data_type {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} acc_dl_data_type;

typedef struct acc_dl_tensor {
    void *data;
    acc_dl_device device;
    int32_t ndim;
    acc_dl_data_type dtype;
    int64_t *shape;
    int64_t *strides;         /* NULL: compact row-major (before 1.2) */
    uint64_t byte_offset;
} acc_dl_tensor;

/* The legacy (unversioned) managed tensor. */
typedef struct acc_dl_managed_tensor {
    acc_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct acc_dl_managed_tensor *self);
} acc_dl_managed_tensor;

typedef struct acc_dl_version {
    uint32_t major;
    uint32_t minor;
} acc_dl_version;

/* DLPack 1.x. */
typedef struct acc_dl_managed_tensor_versioned {
    acc_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct acc_dl_managed_tensor_versioned *self);
    uint64_t flags;
    acc_dl_tensor dl_tensor;
} acc_dl_managed_tensor_versioned;

#endif /* ACC_DLPACK_ABI_H */
