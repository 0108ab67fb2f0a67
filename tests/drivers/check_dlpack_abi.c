/*
 * check_dlpack_abi.c - compiled with a real dlpack.h and -Werror by
 * tests/test_dlpack_header.py: fails to compile when our own declarations
 * in csrc/python/dlpack_abi.h differ from the spec's header.  A 0.6 header
 * (Debian's libdlpack-dev) has no versioned ABI and no kDLOneAPI: those
 * are checked only against a 1.x header (DLPACK_MAJOR_VERSION defined).
 */
#include <dlpack/dlpack.h>
#include <stddef.h>

#include "../../csrc/python/dlpack_abi.h"

#define CHECK_VALUE(name, value)                                         \
    _Static_assert((long long)(name) == (value)                          \
                       && (long long)ACC_##name == (value),              \
                   #name " differs");
ACC_DLPACK_DEVICE_TYPES(CHECK_VALUE)
ACC_DLPACK_TYPE_CODES(CHECK_VALUE)

#define CHECK_FIELD(ours, theirs, field)                                 \
    _Static_assert(offsetof(ours, field) == offsetof(theirs, field),     \
                   #theirs "." #field " offset differs");                \
    _Static_assert(sizeof(((ours *)0)->field)                            \
                       == sizeof(((theirs *)0)->field),                  \
                   #theirs "." #field " size differs");
#define CHECK_STRUCT(ours, theirs)                                       \
    _Static_assert(sizeof(ours) == sizeof(theirs),                       \
                   #theirs " size differs");                             \
    _Static_assert(_Alignof(ours) == _Alignof(theirs),                   \
                   #theirs " alignment differs");

CHECK_STRUCT(acc_dl_device, DLDevice)
CHECK_FIELD(acc_dl_device, DLDevice, device_type)
CHECK_FIELD(acc_dl_device, DLDevice, device_id)

CHECK_STRUCT(acc_dl_data_type, DLDataType)
CHECK_FIELD(acc_dl_data_type, DLDataType, code)
CHECK_FIELD(acc_dl_data_type, DLDataType, bits)
CHECK_FIELD(acc_dl_data_type, DLDataType, lanes)

CHECK_STRUCT(acc_dl_tensor, DLTensor)
CHECK_FIELD(acc_dl_tensor, DLTensor, data)
CHECK_FIELD(acc_dl_tensor, DLTensor, device)
CHECK_FIELD(acc_dl_tensor, DLTensor, ndim)
CHECK_FIELD(acc_dl_tensor, DLTensor, dtype)
CHECK_FIELD(acc_dl_tensor, DLTensor, shape)
CHECK_FIELD(acc_dl_tensor, DLTensor, strides)
CHECK_FIELD(acc_dl_tensor, DLTensor, byte_offset)
_Static_assert(__builtin_types_compatible_p(__typeof__(((DLTensor *)0)->shape),
                                            int64_t *), "DLTensor.shape");
_Static_assert(__builtin_types_compatible_p(
                   __typeof__(((DLTensor *)0)->byte_offset), uint64_t),
               "DLTensor.byte_offset");

CHECK_STRUCT(acc_dl_managed_tensor, DLManagedTensor)
CHECK_FIELD(acc_dl_managed_tensor, DLManagedTensor, dl_tensor)
CHECK_FIELD(acc_dl_managed_tensor, DLManagedTensor, manager_ctx)
CHECK_FIELD(acc_dl_managed_tensor, DLManagedTensor, deleter)

#ifdef DLPACK_MAJOR_VERSION
ACC_DLPACK_DEVICE_TYPES_1(CHECK_VALUE)
ACC_DLPACK_FLAGS(CHECK_VALUE)
_Static_assert(DLPACK_MAJOR_VERSION == ACC_DLPACK_MAJOR_VERSION,
               "a DLPack major version we do not speak");

CHECK_STRUCT(acc_dl_version, DLPackVersion)
CHECK_FIELD(acc_dl_version, DLPackVersion, major)
CHECK_FIELD(acc_dl_version, DLPackVersion, minor)

CHECK_STRUCT(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned)
CHECK_FIELD(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned,
            version)
CHECK_FIELD(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned,
            manager_ctx)
CHECK_FIELD(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned,
            deleter)
CHECK_FIELD(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned,
            flags)
CHECK_FIELD(acc_dl_managed_tensor_versioned, DLManagedTensorVersioned,
            dl_tensor)
#endif

int acc_dlpack_abi_check_unit;
