/*
 * check_ze_api.c - compiled with the SDK's <level_zero/ze_api.h> and
 * -Werror (the `ze` target of this folder's Makefile builds it): fails to
 * compile when one of our own declarations in csrc/backends/level_zero/ze_api.h
 * differs from Intel's.
 *
 *   cc -std=c11 -Wall -Wextra -Werror -c check_ze_api.c -o /dev/null
 */
#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>
#include <stddef.h>

#define ACC_ZE_API_CHECK
#include "../../csrc/backends/level_zero/ze_api.h"

#define CHECK_VALUE(name, value) \
    _Static_assert((long long)(name) == (long long)(value), #name " differs");
ACC_ZE_RESULTS(CHECK_VALUE)
ACC_ZE_API_VERSIONS(CHECK_VALUE)
ACC_ZE_STRUCTURE_TYPES(CHECK_VALUE)
ACC_ZES_STRUCTURE_TYPES(CHECK_VALUE)
ACC_ZES_MEM_LOCS(CHECK_VALUE)
ACC_ZE_DEVICE_TYPES(CHECK_VALUE)
ACC_ZE_MEMORY_TYPES(CHECK_VALUE)
ACC_ZE_COMMAND_QUEUE_MODES(CHECK_VALUE)
ACC_ZE_MODULE_FORMATS(CHECK_VALUE)
ACC_ZE_COMMAND_QUEUE_PRIORITIES(CHECK_VALUE)
ACC_ZE_FLAGS(CHECK_VALUE)
ACC_ZE_SIZES(CHECK_VALUE)

_Static_assert(ZE_API_VERSION_CURRENT >= ACC_ZE_DECLARED_VERSION,
               "the SDK is older than the spec our header declares");
_Static_assert(ACC_ZE_MAKE_VERSION(1, 7) == ZE_MAKE_VERSION(1, 7),
               "ACC_ZE_MAKE_VERSION differs");

/* The enums our header declares must be 4 bytes, as the SDK's are. */
#define CHECK_ENUM_SIZE(type) \
    _Static_assert(sizeof(type) == 4, #type " is not 4 bytes");
CHECK_ENUM_SIZE(ze_result_t)
CHECK_ENUM_SIZE(ze_api_version_t)
CHECK_ENUM_SIZE(ze_structure_type_t)
CHECK_ENUM_SIZE(ze_device_type_t)
CHECK_ENUM_SIZE(ze_memory_type_t)
CHECK_ENUM_SIZE(ze_command_queue_mode_t)
CHECK_ENUM_SIZE(ze_module_format_t)
CHECK_ENUM_SIZE(ze_command_queue_priority_t)
CHECK_ENUM_SIZE(zes_structure_type_t)
CHECK_ENUM_SIZE(zes_mem_loc_t)
CHECK_ENUM_SIZE(zes_mem_type_t)
CHECK_ENUM_SIZE(zes_mem_health_t)

_Static_assert(__builtin_types_compatible_p(zes_device_handle_t,
                                            ze_device_handle_t),
               "zes_device_handle_t is not ze_device_handle_t");

#define CHECK_SCALAR(name, type)                                    \
    _Static_assert(__builtin_types_compatible_p(name, type),        \
                   #name " is not " #type);
ACC_ZE_SCALAR_TYPES(CHECK_SCALAR)

/*
 * Structs: same size, and each field at the same offset with the same
 * type.  Field types that name our own structs are compared with the
 * SDK's struct of the same name (whose layout is checked on its own).
 */
#undef ACC_ZE_OWN
#define ACC_ZE_OWN(name) name
#define CHECK_FIELD(S, type, name, dims)                                  \
    _Static_assert(offsetof(acc_check_##S, name) == offsetof(S, name),    \
                   #S "." #name " offset differs");                       \
    _Static_assert(sizeof(((acc_check_##S *)0)->name)                     \
                       == sizeof(((S *)0)->name),                         \
                   #S "." #name " size differs");                         \
    _Static_assert(__builtin_types_compatible_p(                          \
                       type dims, __typeof__(((S *)0)->name)),            \
                   #S "." #name " type differs");
#define CHECK_STRUCT(S, fields)                                           \
    _Static_assert(sizeof(acc_check_##S) == sizeof(S),                    \
                   #S " size differs");                                   \
    _Static_assert(_Alignof(acc_check_##S) == _Alignof(S),                \
                   #S " alignment differs");                              \
    fields(CHECK_FIELD, S)
ACC_ZE_STRUCTS(CHECK_STRUCT)

#define CHECK_FUNCTION(name, params)                                      \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,           \
                                                __typeof__(&name)),       \
                   #name " signature differs");
ACC_ZE_FUNCTIONS(CHECK_FUNCTION)
ACC_ZE_IPC_FUNCTIONS(CHECK_FUNCTION)
_Static_assert(__builtin_types_compatible_p(acc_pfn_zelLoaderGetVersions,
                                            __typeof__(&zelLoaderGetVersions)),
               "zelLoaderGetVersions signature differs");

/*
 * Newer than spec 1.4: only SDKs that define ZE_API_VERSION_CURRENT_M
 * (1.10 and later, spec >= 1.6) declare them.
 */
#if defined(ZE_API_VERSION_CURRENT_M)
#define CHECK_OPTIONAL(name, version, params)                             \
    _Static_assert(__builtin_types_compatible_p(acc_pfn_##name,           \
                                                __typeof__(&name)),       \
                   #name " signature differs");
ACC_ZE_OPTIONAL_FUNCTIONS(CHECK_OPTIONAL)
#if ZE_API_VERSION_CURRENT_M >= ZE_MAKE_VERSION(1, 7)
_Static_assert(ACC_ZE_COMMAND_QUEUE_FLAG_IN_ORDER
                   == ZE_COMMAND_QUEUE_FLAG_IN_ORDER,
               "ZE_COMMAND_QUEUE_FLAG_IN_ORDER differs");
#endif
#endif

int acc_ze_api_check_unit;
