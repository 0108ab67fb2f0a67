/*
 * ze_api.h - our own minimal declarations of the oneAPI Level Zero API.
 *
 * Only what the backend uses, so building needs no Level Zero SDK.  The
 * declarations follow spec 1.4, the version of Debian bookworm's loader
 * (libze1 1.8.12); newer entry points are optional and looked up with
 * dlsym.  tests/drivers/check_ze_api.c compiles this header in check mode
 * (ACC_ZE_API_CHECK) together with the SDK's <level_zero/ze_api.h>, so
 * every constant, struct layout and function signature here provably
 * matches Intel's.
 *
 * In check mode the SDK owns the names: this header then declares no
 * enum, handle or flag type of its own, defines its structs under the
 * prefix acc_check_ (see ACC_ZE_OWN) so both layouts can be compared, and
 * spells the function pointer types with the SDK's types.
 */
#ifndef ACC_ZE_API_H
#define ACC_ZE_API_H

#include <stddef.h>
#include <stdint.h>

#define ACC_ZE_MAKE_VERSION(major, minor) \
    ((uint32_t)(major) << 16 | ((uint32_t)(minor) & 0xffffu))
#define ACC_ZE_MAJOR_VERSION(version) ((uint32_t)(version) >> 16)
#define ACC_ZE_MINOR_VERSION(version) ((uint32_t)(version) & 0xffffu)

/* The spec version of the declarations below. */
#define ACC_ZE_DECLARED_VERSION ACC_ZE_MAKE_VERSION(1, 4)

/*
 * Values from specs newer than 1.4: not in the 1.8.12 SDK, so they carry
 * our prefix.  check_ze_api.c compares them when the SDK is new enough.
 */
/* ze_command_queue_flag_t ZE_COMMAND_QUEUE_FLAG_IN_ORDER, spec 1.7. */
#define ACC_ZE_COMMAND_QUEUE_FLAG_IN_ORDER (1u << 1)

/* Every ze_result_t of spec 1.4: name, value. */
#define ACC_ZE_RESULTS(X)                                          \
    X(ZE_RESULT_SUCCESS, 0)                                        \
    X(ZE_RESULT_NOT_READY, 1)                                      \
    X(ZE_RESULT_ERROR_DEVICE_LOST, 0x70000001)                     \
    X(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, 0x70000002)              \
    X(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, 0x70000003)            \
    X(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, 0x70000004)            \
    X(ZE_RESULT_ERROR_MODULE_LINK_FAILURE, 0x70000005)             \
    X(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, 0x70000006)           \
    X(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE, 0x70000007)       \
    X(ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX, 0x7ff00001)        \
    X(ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE, 0x7ff00002)        \
    X(ZE_RESULT_EXP_ERROR_REMOTE_DEVICE, 0x7ff00003)               \
    X(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, 0x70010000)        \
    X(ZE_RESULT_ERROR_NOT_AVAILABLE, 0x70010001)                   \
    X(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, 0x70020000)          \
    X(ZE_RESULT_WARNING_DROPPED_DATA, 0x70020001)                  \
    X(ZE_RESULT_ERROR_UNINITIALIZED, 0x78000001)                   \
    X(ZE_RESULT_ERROR_UNSUPPORTED_VERSION, 0x78000002)             \
    X(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, 0x78000003)             \
    X(ZE_RESULT_ERROR_INVALID_ARGUMENT, 0x78000004)                \
    X(ZE_RESULT_ERROR_INVALID_NULL_HANDLE, 0x78000005)             \
    X(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, 0x78000006)            \
    X(ZE_RESULT_ERROR_INVALID_NULL_POINTER, 0x78000007)            \
    X(ZE_RESULT_ERROR_INVALID_SIZE, 0x78000008)                    \
    X(ZE_RESULT_ERROR_UNSUPPORTED_SIZE, 0x78000009)                \
    X(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, 0x7800000a)           \
    X(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT, 0x7800000b)  \
    X(ZE_RESULT_ERROR_INVALID_ENUMERATION, 0x7800000c)             \
    X(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION, 0x7800000d)         \
    X(ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT, 0x7800000e)        \
    X(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, 0x7800000f)           \
    X(ZE_RESULT_ERROR_INVALID_GLOBAL_NAME, 0x78000010)             \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, 0x78000011)             \
    X(ZE_RESULT_ERROR_INVALID_FUNCTION_NAME, 0x78000012)           \
    X(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION, 0x78000013)    \
    X(ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION, 0x78000014)  \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX, 0x78000015)   \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE, 0x78000016)    \
    X(ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE, 0x78000017)  \
    X(ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED, 0x78000018)         \
    X(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE, 0x78000019)       \
    X(ZE_RESULT_ERROR_OVERLAPPING_REGIONS, 0x7800001a)             \
    X(ZE_RESULT_WARNING_ACTION_REQUIRED, 0x7800001b)               \
    X(ZE_RESULT_ERROR_UNKNOWN, 0x7ffffffe)

#define ACC_ZE_API_VERSIONS(X)                    \
    X(ZE_API_VERSION_1_0, ACC_ZE_MAKE_VERSION(1, 0)) \
    X(ZE_API_VERSION_1_1, ACC_ZE_MAKE_VERSION(1, 1)) \
    X(ZE_API_VERSION_1_2, ACC_ZE_MAKE_VERSION(1, 2)) \
    X(ZE_API_VERSION_1_3, ACC_ZE_MAKE_VERSION(1, 3)) \
    X(ZE_API_VERSION_1_4, ACC_ZE_MAKE_VERSION(1, 4))

/* The ze_structure_type_t values of the structs declared below. */
#define ACC_ZE_STRUCTURE_TYPES(X)                               \
    X(ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES, 0x1)                 \
    X(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES, 0x3)                 \
    X(ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES, 0x4)         \
    X(ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES, 0x5)          \
    X(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES, 0x6)    \
    X(ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, 0x7)          \
    X(ZE_STRUCTURE_TYPE_CONTEXT_DESC, 0xd)                      \
    X(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, 0xe)                \
    X(ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, 0xf)                 \
    X(ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, 0x10)                  \
    X(ZE_STRUCTURE_TYPE_EVENT_DESC, 0x11)                       \
    X(ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, 0x15)            \
    X(ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, 0x16)              \
    X(ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, 0x17)     \
    X(ZE_STRUCTURE_TYPE_MODULE_DESC, 0x1b)                      \
    X(ZE_STRUCTURE_TYPE_KERNEL_DESC, 0x1d)                      \
    X(ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES, 0x1e)                \
    X(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2, 0x00020006)

/* Sysman (zes_api.h): the zes_structure_type_t values of the structs
 * declared below, and the memory locations. */
#define ACC_ZES_STRUCTURE_TYPES(X)                  \
    X(ZES_STRUCTURE_TYPE_PCI_PROPERTIES, 0x2)       \
    X(ZES_STRUCTURE_TYPE_MEM_PROPERTIES, 0xb)       \
    X(ZES_STRUCTURE_TYPE_MEM_STATE, 0x1e)

#define ACC_ZES_MEM_LOCS(X)         \
    X(ZES_MEM_LOC_SYSTEM, 0)        \
    X(ZES_MEM_LOC_DEVICE, 1)

#define ACC_ZE_DEVICE_TYPES(X)    \
    X(ZE_DEVICE_TYPE_GPU, 1)      \
    X(ZE_DEVICE_TYPE_CPU, 2)      \
    X(ZE_DEVICE_TYPE_FPGA, 3)     \
    X(ZE_DEVICE_TYPE_MCA, 4)      \
    X(ZE_DEVICE_TYPE_VPU, 5)

#define ACC_ZE_MEMORY_TYPES(X)           \
    X(ZE_MEMORY_TYPE_UNKNOWN, 0)         \
    X(ZE_MEMORY_TYPE_HOST, 1)            \
    X(ZE_MEMORY_TYPE_DEVICE, 2)          \
    X(ZE_MEMORY_TYPE_SHARED, 3)

#define ACC_ZE_COMMAND_QUEUE_MODES(X)          \
    X(ZE_COMMAND_QUEUE_MODE_DEFAULT, 0)        \
    X(ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS, 1)    \
    X(ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, 2)

#define ACC_ZE_MODULE_FORMATS(X)         \
    X(ZE_MODULE_FORMAT_IL_SPIRV, 0)      \
    X(ZE_MODULE_FORMAT_NATIVE, 1)

#define ACC_ZE_COMMAND_QUEUE_PRIORITIES(X)             \
    X(ZE_COMMAND_QUEUE_PRIORITY_NORMAL, 0)             \
    X(ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_LOW, 1)       \
    X(ZE_COMMAND_QUEUE_PRIORITY_PRIORITY_HIGH, 2)

/* Bits of the uint32_t flag types (enums of ZE_BIT() values in the SDK). */
#define ACC_ZE_FLAGS(X)                                          \
    X(ZE_INIT_FLAG_GPU_ONLY, 1)                                  \
    X(ZE_INIT_FLAG_VPU_ONLY, 2)                                  \
    X(ZE_DEVICE_PROPERTY_FLAG_INTEGRATED, 1)                     \
    X(ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE, 2)                      \
    X(ZE_DEVICE_MODULE_FLAG_FP16, 1)                             \
    X(ZE_DEVICE_MODULE_FLAG_FP64, 2)                             \
    X(ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE, 1)           \
    X(ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY, 2)              \
    X(ZE_COMMAND_QUEUE_FLAG_EXPLICIT_ONLY, 1)                    \
    X(ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1)                        \
    X(ZE_EVENT_POOL_FLAG_IPC, 2)                                 \
    X(ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP, 4)                    \
    X(ZE_EVENT_SCOPE_FLAG_SUBDEVICE, 1)                          \
    X(ZE_EVENT_SCOPE_FLAG_DEVICE, 2)                             \
    X(ZE_EVENT_SCOPE_FLAG_HOST, 4)                               \
    X(ZE_IPC_MEMORY_FLAG_BIAS_CACHED, 1)                         \
    X(ZE_IPC_MEMORY_FLAG_BIAS_UNCACHED, 2)

/* Array sizes (macros in the SDK). */
#define ACC_ZE_SIZES(X)                 \
    X(ZE_MAX_DRIVER_UUID_SIZE, 16)      \
    X(ZE_MAX_DEVICE_UUID_SIZE, 16)      \
    X(ZE_MAX_DEVICE_NAME, 256)          \
    X(ZE_MAX_NATIVE_KERNEL_UUID_SIZE, 16) \
    X(ZE_SUBGROUPSIZE_COUNT, 8)         \
    X(ZE_MAX_KERNEL_UUID_SIZE, 16)      \
    X(ZE_MAX_MODULE_UUID_SIZE, 16)      \
    X(ZEL_COMPONENT_STRING_SIZE, 64)    \
    X(ZE_MAX_IPC_HANDLE_SIZE, 64)

/* The plain integer types: name, C type. */
#define ACC_ZE_SCALAR_TYPES(X)                               \
    X(ze_bool_t, uint8_t)                                    \
    X(ze_init_flags_t, uint32_t)                             \
    X(ze_device_property_flags_t, uint32_t)                  \
    X(ze_device_module_flags_t, uint32_t)                    \
    X(ze_device_fp_flags_t, uint32_t)                        \
    X(ze_command_queue_group_property_flags_t, uint32_t)     \
    X(ze_device_memory_property_flags_t, uint32_t)           \
    X(ze_context_flags_t, uint32_t)                          \
    X(ze_command_queue_flags_t, uint32_t)                    \
    X(ze_command_list_flags_t, uint32_t)                     \
    X(ze_event_pool_flags_t, uint32_t)                       \
    X(ze_event_scope_flags_t, uint32_t)                      \
    X(ze_device_mem_alloc_flags_t, uint32_t)                 \
    X(ze_host_mem_alloc_flags_t, uint32_t)                   \
    X(ze_kernel_flags_t, uint32_t)                           \
    X(ze_ipc_memory_flags_t, uint32_t)

/*
 * Structs, each as a list of F(struct, type, name, array suffix), so that
 * check_ze_api.c can compare every field with the SDK's.  A field whose
 * type is one of these structs names it through ACC_ZE_OWN.
 */
#ifdef ACC_ZE_API_CHECK
#define ACC_ZE_OWN(name) acc_check_##name
#else
#define ACC_ZE_OWN(name) name
#endif

#define ACC_ZE_DRIVER_UUID_FIELDS(F, S) \
    F(S, uint8_t, id, [ZE_MAX_DRIVER_UUID_SIZE])

#define ACC_ZE_DRIVER_PROPERTIES_FIELDS(F, S)         \
    F(S, ze_structure_type_t, stype, )                \
    F(S, void *, pNext, )                             \
    F(S, ACC_ZE_OWN(ze_driver_uuid_t), uuid, )        \
    F(S, uint32_t, driverVersion, )

#define ACC_ZE_DEVICE_UUID_FIELDS(F, S) \
    F(S, uint8_t, id, [ZE_MAX_DEVICE_UUID_SIZE])

#define ACC_ZE_DEVICE_PROPERTIES_FIELDS(F, S)         \
    F(S, ze_structure_type_t, stype, )                \
    F(S, void *, pNext, )                             \
    F(S, ze_device_type_t, type, )                    \
    F(S, uint32_t, vendorId, )                        \
    F(S, uint32_t, deviceId, )                        \
    F(S, ze_device_property_flags_t, flags, )         \
    F(S, uint32_t, subdeviceId, )                     \
    F(S, uint32_t, coreClockRate, )                   \
    F(S, uint64_t, maxMemAllocSize, )                 \
    F(S, uint32_t, maxHardwareContexts, )             \
    F(S, uint32_t, maxCommandQueuePriority, )         \
    F(S, uint32_t, numThreadsPerEU, )                 \
    F(S, uint32_t, physicalEUSimdWidth, )             \
    F(S, uint32_t, numEUsPerSubslice, )               \
    F(S, uint32_t, numSubslicesPerSlice, )            \
    F(S, uint32_t, numSlices, )                       \
    F(S, uint64_t, timerResolution, )                 \
    F(S, uint32_t, timestampValidBits, )              \
    F(S, uint32_t, kernelTimestampValidBits, )        \
    F(S, ACC_ZE_OWN(ze_device_uuid_t), uuid, )        \
    F(S, char, name, [ZE_MAX_DEVICE_NAME])

#define ACC_ZE_DEVICE_MEMORY_PROPERTIES_FIELDS(F, S)      \
    F(S, ze_structure_type_t, stype, )                    \
    F(S, void *, pNext, )                                 \
    F(S, ze_device_memory_property_flags_t, flags, )      \
    F(S, uint32_t, maxClockRate, )                        \
    F(S, uint32_t, maxBusWidth, )                         \
    F(S, uint64_t, totalSize, )                           \
    F(S, char, name, [ZE_MAX_DEVICE_NAME])

#define ACC_ZE_COMMAND_QUEUE_GROUP_PROPERTIES_FIELDS(F, S)    \
    F(S, ze_structure_type_t, stype, )                        \
    F(S, void *, pNext, )                                     \
    F(S, ze_command_queue_group_property_flags_t, flags, )    \
    F(S, size_t, maxMemoryFillPatternSize, )                  \
    F(S, uint32_t, numQueues, )

#define ACC_ZE_CONTEXT_DESC_FIELDS(F, S)  \
    F(S, ze_structure_type_t, stype, )    \
    F(S, const void *, pNext, )           \
    F(S, ze_context_flags_t, flags, )

#define ACC_ZE_COMMAND_QUEUE_DESC_FIELDS(F, S)        \
    F(S, ze_structure_type_t, stype, )                \
    F(S, const void *, pNext, )                       \
    F(S, uint32_t, ordinal, )                         \
    F(S, uint32_t, index, )                           \
    F(S, ze_command_queue_flags_t, flags, )           \
    F(S, ze_command_queue_mode_t, mode, )             \
    F(S, ze_command_queue_priority_t, priority, )

#define ACC_ZE_COMMAND_LIST_DESC_FIELDS(F, S)         \
    F(S, ze_structure_type_t, stype, )                \
    F(S, const void *, pNext, )                       \
    F(S, uint32_t, commandQueueGroupOrdinal, )        \
    F(S, ze_command_list_flags_t, flags, )

#define ACC_ZE_EVENT_POOL_DESC_FIELDS(F, S)   \
    F(S, ze_structure_type_t, stype, )        \
    F(S, const void *, pNext, )               \
    F(S, ze_event_pool_flags_t, flags, )      \
    F(S, uint32_t, count, )

#define ACC_ZE_EVENT_DESC_FIELDS(F, S)        \
    F(S, ze_structure_type_t, stype, )        \
    F(S, const void *, pNext, )               \
    F(S, uint32_t, index, )                   \
    F(S, ze_event_scope_flags_t, signal, )    \
    F(S, ze_event_scope_flags_t, wait, )

#define ACC_ZE_DEVICE_MEM_ALLOC_DESC_FIELDS(F, S) \
    F(S, ze_structure_type_t, stype, )            \
    F(S, const void *, pNext, )                   \
    F(S, ze_device_mem_alloc_flags_t, flags, )    \
    F(S, uint32_t, ordinal, )

#define ACC_ZE_HOST_MEM_ALLOC_DESC_FIELDS(F, S)   \
    F(S, ze_structure_type_t, stype, )            \
    F(S, const void *, pNext, )                   \
    F(S, ze_host_mem_alloc_flags_t, flags, )
#define ACC_ZES_PCI_ADDRESS_FIELDS(F, S)  \
    F(S, uint32_t, domain, )              \
    F(S, uint32_t, bus, )                 \
    F(S, uint32_t, device, )              \
    F(S, uint32_t, function, )

#define ACC_ZES_PCI_SPEED_FIELDS(F, S)    \
    F(S, int32_t, gen, )                  \
    F(S, int32_t, width, )                \
    F(S, int64_t, maxBandwidth, )

#define ACC_ZES_PCI_PROPERTIES_FIELDS(F, S)               \
    F(S, zes_structure_type_t, stype, )                   \
    F(S, void *, pNext, )                                 \
    F(S, ACC_ZE_OWN(zes_pci_address_t), address, )        \
    F(S, ACC_ZE_OWN(zes_pci_speed_t), maxSpeed, )         \
    F(S, ze_bool_t, haveBandwidthCounters, )              \
    F(S, ze_bool_t, havePacketCounters, )                 \
    F(S, ze_bool_t, haveReplayCounters, )

#define ACC_ZES_MEM_PROPERTIES_FIELDS(F, S)   \
    F(S, zes_structure_type_t, stype, )       \
    F(S, void *, pNext, )                     \
    F(S, zes_mem_type_t, type, )              \
    F(S, ze_bool_t, onSubdevice, )            \
    F(S, uint32_t, subdeviceId, )             \
    F(S, zes_mem_loc_t, location, )           \
    F(S, uint64_t, physicalSize, )            \
    F(S, int32_t, busWidth, )                 \
    F(S, int32_t, numChannels, )

#define ACC_ZES_MEM_STATE_FIELDS(F, S)        \
    F(S, zes_structure_type_t, stype, )       \
    F(S, const void *, pNext, )               \
    F(S, zes_mem_health_t, health, )          \
    F(S, uint64_t, free, )                    \
    F(S, uint64_t, size, )

#define ACC_ZE_MEMORY_ALLOCATION_PROPERTIES_FIELDS(F, S) \
    F(S, ze_structure_type_t, stype, )                   \
    F(S, void *, pNext, )                                \
    F(S, ze_memory_type_t, type, )                       \
    F(S, uint64_t, id, )                                 \
    F(S, uint64_t, pageSize, )

#define ACC_ZE_KERNEL_TIMESTAMP_DATA_FIELDS(F, S) \
    F(S, uint64_t, kernelStart, )                 \
    F(S, uint64_t, kernelEnd, )

#define ACC_ZE_DEVICE_COMPUTE_PROPERTIES_FIELDS(F, S)     \
    F(S, ze_structure_type_t, stype, )                    \
    F(S, void *, pNext, )                                 \
    F(S, uint32_t, maxTotalGroupSize, )                   \
    F(S, uint32_t, maxGroupSizeX, )                       \
    F(S, uint32_t, maxGroupSizeY, )                       \
    F(S, uint32_t, maxGroupSizeZ, )                       \
    F(S, uint32_t, maxGroupCountX, )                      \
    F(S, uint32_t, maxGroupCountY, )                      \
    F(S, uint32_t, maxGroupCountZ, )                      \
    F(S, uint32_t, maxSharedLocalMemory, )                \
    F(S, uint32_t, numSubGroupSizes, )                    \
    F(S, uint32_t, subGroupSizes, [ZE_SUBGROUPSIZE_COUNT])

#define ACC_ZE_MODULE_CONSTANTS_FIELDS(F, S)  \
    F(S, uint32_t, numConstants, )            \
    F(S, const uint32_t *, pConstantIds, )    \
    F(S, const void **, pConstantValues, )

#define ACC_ZE_MODULE_DESC_FIELDS(F, S)                           \
    F(S, ze_structure_type_t, stype, )                            \
    F(S, const void *, pNext, )                                   \
    F(S, ze_module_format_t, format, )                            \
    F(S, size_t, inputSize, )                                     \
    F(S, const uint8_t *, pInputModule, )                         \
    F(S, const char *, pBuildFlags, )                             \
    F(S, const ACC_ZE_OWN(ze_module_constants_t) *, pConstants, )

#define ACC_ZE_KERNEL_DESC_FIELDS(F, S)   \
    F(S, ze_structure_type_t, stype, )    \
    F(S, const void *, pNext, )           \
    F(S, ze_kernel_flags_t, flags, )      \
    F(S, const char *, pKernelName, )

#define ACC_ZE_KERNEL_UUID_FIELDS(F, S)               \
    F(S, uint8_t, kid, [ZE_MAX_KERNEL_UUID_SIZE])     \
    F(S, uint8_t, mid, [ZE_MAX_MODULE_UUID_SIZE])

#define ACC_ZE_KERNEL_PROPERTIES_FIELDS(F, S)     \
    F(S, ze_structure_type_t, stype, )            \
    F(S, void *, pNext, )                         \
    F(S, uint32_t, numKernelArgs, )               \
    F(S, uint32_t, requiredGroupSizeX, )          \
    F(S, uint32_t, requiredGroupSizeY, )          \
    F(S, uint32_t, requiredGroupSizeZ, )          \
    F(S, uint32_t, requiredNumSubGroups, )        \
    F(S, uint32_t, requiredSubgroupSize, )        \
    F(S, uint32_t, maxSubgroupSize, )             \
    F(S, uint32_t, maxNumSubgroups, )             \
    F(S, uint32_t, localMemSize, )                \
    F(S, uint32_t, privateMemSize, )              \
    F(S, uint32_t, spillMemSize, )                \
    F(S, ACC_ZE_OWN(ze_kernel_uuid_t), uuid, )

#define ACC_ZE_GROUP_COUNT_FIELDS(F, S)   \
    F(S, uint32_t, groupCountX, )         \
    F(S, uint32_t, groupCountY, )         \
    F(S, uint32_t, groupCountZ, )

/* Interprocess handles: the driver's opaque bytes.  On Linux Intel's
 * driver puts the file descriptor the handle rests on (valid in the
 * exporting process only) in the first bytes of data: memory handles
 * as a uint64_t, event pool handles as an int followed by the pool's
 * event count (see csrc/backends/level_zero/sharing.c). */
#define ACC_ZE_IPC_MEM_HANDLE_FIELDS(F, S) \
    F(S, char, data, [ZE_MAX_IPC_HANDLE_SIZE])

#define ACC_ZE_IPC_EVENT_POOL_HANDLE_FIELDS(F, S) \
    F(S, char, data, [ZE_MAX_IPC_HANDLE_SIZE])

/* The loader's own version query (loader/ze_loader.h). */
#define ACC_ZEL_VERSION_FIELDS(F, S)  \
    F(S, int, major, )                \
    F(S, int, minor, )                \
    F(S, int, patch, )

#define ACC_ZEL_COMPONENT_VERSION_FIELDS(F, S)                    \
    F(S, char, component_name, [ZEL_COMPONENT_STRING_SIZE])       \
    F(S, ze_api_version_t, spec_version, )                        \
    F(S, ACC_ZE_OWN(zel_version_t), component_lib_version, )

#define ACC_ZE_NATIVE_KERNEL_UUID_FIELDS(F, S) \
    F(S, uint8_t, id, [ZE_MAX_NATIVE_KERNEL_UUID_SIZE])

#define ACC_ZE_DEVICE_MODULE_PROPERTIES_FIELDS(F, S)          \
    F(S, ze_structure_type_t, stype, )                        \
    F(S, void *, pNext, )                                     \
    F(S, uint32_t, spirvVersionSupported, )                   \
    F(S, ze_device_module_flags_t, flags, )                   \
    F(S, ze_device_fp_flags_t, fp16flags, )                   \
    F(S, ze_device_fp_flags_t, fp32flags, )                   \
    F(S, ze_device_fp_flags_t, fp64flags, )                   \
    F(S, uint32_t, maxArgumentsSize, )                        \
    F(S, uint32_t, printfBufferSize, )                        \
    F(S, ACC_ZE_OWN(ze_native_kernel_uuid_t), nativeKernelSupported, )

#define ACC_ZE_KERNEL_TIMESTAMP_RESULT_FIELDS(F, S)           \
    F(S, ACC_ZE_OWN(ze_kernel_timestamp_data_t), global, )    \
    F(S, ACC_ZE_OWN(ze_kernel_timestamp_data_t), context, )

/* Every struct, in dependency order: X(type name, field list). */
#define ACC_ZE_STRUCTS(X)                                                 \
    X(ze_driver_uuid_t, ACC_ZE_DRIVER_UUID_FIELDS)                        \
    X(ze_driver_properties_t, ACC_ZE_DRIVER_PROPERTIES_FIELDS)            \
    X(ze_device_uuid_t, ACC_ZE_DEVICE_UUID_FIELDS)                        \
    X(ze_device_properties_t, ACC_ZE_DEVICE_PROPERTIES_FIELDS)            \
    X(ze_native_kernel_uuid_t, ACC_ZE_NATIVE_KERNEL_UUID_FIELDS)          \
    X(ze_device_module_properties_t,                                      \
      ACC_ZE_DEVICE_MODULE_PROPERTIES_FIELDS)                             \
    X(ze_device_memory_properties_t,                                      \
      ACC_ZE_DEVICE_MEMORY_PROPERTIES_FIELDS)                             \
    X(ze_command_queue_group_properties_t,                                \
      ACC_ZE_COMMAND_QUEUE_GROUP_PROPERTIES_FIELDS)                       \
    X(ze_context_desc_t, ACC_ZE_CONTEXT_DESC_FIELDS)                      \
    X(ze_command_queue_desc_t, ACC_ZE_COMMAND_QUEUE_DESC_FIELDS)          \
    X(ze_command_list_desc_t, ACC_ZE_COMMAND_LIST_DESC_FIELDS)            \
    X(ze_event_pool_desc_t, ACC_ZE_EVENT_POOL_DESC_FIELDS)                \
    X(ze_event_desc_t, ACC_ZE_EVENT_DESC_FIELDS)                          \
    X(ze_device_mem_alloc_desc_t, ACC_ZE_DEVICE_MEM_ALLOC_DESC_FIELDS)    \
    X(ze_host_mem_alloc_desc_t, ACC_ZE_HOST_MEM_ALLOC_DESC_FIELDS)        \
    X(ze_memory_allocation_properties_t,                                  \
      ACC_ZE_MEMORY_ALLOCATION_PROPERTIES_FIELDS)                         \
    X(ze_kernel_timestamp_data_t, ACC_ZE_KERNEL_TIMESTAMP_DATA_FIELDS)    \
    X(ze_kernel_timestamp_result_t, ACC_ZE_KERNEL_TIMESTAMP_RESULT_FIELDS) \
    X(ze_device_compute_properties_t,                                     \
      ACC_ZE_DEVICE_COMPUTE_PROPERTIES_FIELDS)                            \
    X(ze_module_constants_t, ACC_ZE_MODULE_CONSTANTS_FIELDS)              \
    X(ze_module_desc_t, ACC_ZE_MODULE_DESC_FIELDS)                        \
    X(ze_kernel_desc_t, ACC_ZE_KERNEL_DESC_FIELDS)                        \
    X(ze_kernel_uuid_t, ACC_ZE_KERNEL_UUID_FIELDS)                        \
    X(ze_kernel_properties_t, ACC_ZE_KERNEL_PROPERTIES_FIELDS)            \
    X(ze_group_count_t, ACC_ZE_GROUP_COUNT_FIELDS)                        \
    X(zel_version_t, ACC_ZEL_VERSION_FIELDS)                              \
    X(zel_component_version_t, ACC_ZEL_COMPONENT_VERSION_FIELDS)          \
    X(zes_pci_address_t, ACC_ZES_PCI_ADDRESS_FIELDS)                      \
    X(zes_pci_speed_t, ACC_ZES_PCI_SPEED_FIELDS)                          \
    X(zes_pci_properties_t, ACC_ZES_PCI_PROPERTIES_FIELDS)                \
    X(zes_mem_properties_t, ACC_ZES_MEM_PROPERTIES_FIELDS)                \
    X(zes_mem_state_t, ACC_ZES_MEM_STATE_FIELDS)                          \
    X(ze_ipc_mem_handle_t, ACC_ZE_IPC_MEM_HANDLE_FIELDS)                  \
    X(ze_ipc_event_pool_handle_t, ACC_ZE_IPC_EVENT_POOL_HANDLE_FIELDS)

#ifndef ACC_ZE_API_CHECK

#define ACC_ZE_ENUM_ENTRY(name, value) name = value,
typedef enum _ze_result_t {
    ACC_ZE_RESULTS(ACC_ZE_ENUM_ENTRY)
    ZE_RESULT_FORCE_UINT32 = 0x7fffffff
} ze_result_t;
typedef enum _ze_api_version_t {
    ACC_ZE_API_VERSIONS(ACC_ZE_ENUM_ENTRY)
    ZE_API_VERSION_FORCE_UINT32 = 0x7fffffff
} ze_api_version_t;
typedef enum _ze_structure_type_t {
    ACC_ZE_STRUCTURE_TYPES(ACC_ZE_ENUM_ENTRY)
    ZE_STRUCTURE_TYPE_FORCE_UINT32 = 0x7fffffff
} ze_structure_type_t;
typedef enum _zes_structure_type_t {
    ACC_ZES_STRUCTURE_TYPES(ACC_ZE_ENUM_ENTRY)
    ZES_STRUCTURE_TYPE_FORCE_UINT32 = 0x7fffffff
} zes_structure_type_t;
typedef enum _zes_mem_loc_t {
    ACC_ZES_MEM_LOCS(ACC_ZE_ENUM_ENTRY)
    ZES_MEM_LOC_FORCE_UINT32 = 0x7fffffff
} zes_mem_loc_t;
/* Read but never interpreted: no values needed. */
typedef enum _zes_mem_type_t {
    ZES_MEM_TYPE_FORCE_UINT32 = 0x7fffffff
} zes_mem_type_t;
typedef enum _zes_mem_health_t {
    ZES_MEM_HEALTH_FORCE_UINT32 = 0x7fffffff
} zes_mem_health_t;
typedef enum _ze_device_type_t {
    ACC_ZE_DEVICE_TYPES(ACC_ZE_ENUM_ENTRY)
    ZE_DEVICE_TYPE_FORCE_UINT32 = 0x7fffffff
} ze_device_type_t;
typedef enum _ze_memory_type_t {
    ACC_ZE_MEMORY_TYPES(ACC_ZE_ENUM_ENTRY)
    ZE_MEMORY_TYPE_FORCE_UINT32 = 0x7fffffff
} ze_memory_type_t;
typedef enum _ze_command_queue_mode_t {
    ACC_ZE_COMMAND_QUEUE_MODES(ACC_ZE_ENUM_ENTRY)
    ZE_COMMAND_QUEUE_MODE_FORCE_UINT32 = 0x7fffffff
} ze_command_queue_mode_t;
typedef enum _ze_module_format_t {
    ACC_ZE_MODULE_FORMATS(ACC_ZE_ENUM_ENTRY)
    ZE_MODULE_FORMAT_FORCE_UINT32 = 0x7fffffff
} ze_module_format_t;
typedef enum _ze_command_queue_priority_t {
    ACC_ZE_COMMAND_QUEUE_PRIORITIES(ACC_ZE_ENUM_ENTRY)
    ZE_COMMAND_QUEUE_PRIORITY_FORCE_UINT32 = 0x7fffffff
} ze_command_queue_priority_t;
enum {
    ACC_ZE_FLAGS(ACC_ZE_ENUM_ENTRY)
    ACC_ZE_SIZES(ACC_ZE_ENUM_ENTRY)
};
#undef ACC_ZE_ENUM_ENTRY

#define ACC_ZE_SCALAR_TYPEDEF(name, type) typedef type name;
ACC_ZE_SCALAR_TYPES(ACC_ZE_SCALAR_TYPEDEF)
#undef ACC_ZE_SCALAR_TYPEDEF

/* Opaque handles, with the SDK's struct tags. */
typedef struct _ze_driver_handle_t *ze_driver_handle_t;
typedef struct _ze_device_handle_t *ze_device_handle_t;
typedef struct _ze_context_handle_t *ze_context_handle_t;
typedef struct _ze_command_list_handle_t *ze_command_list_handle_t;
typedef struct _ze_command_queue_handle_t *ze_command_queue_handle_t;
typedef struct _ze_fence_handle_t *ze_fence_handle_t;
typedef struct _ze_event_pool_handle_t *ze_event_pool_handle_t;
typedef struct _ze_event_handle_t *ze_event_handle_t;
typedef struct _ze_module_handle_t *ze_module_handle_t;
typedef struct _ze_module_build_log_handle_t *ze_module_build_log_handle_t;
typedef struct _ze_kernel_handle_t *ze_kernel_handle_t;
/* Sysman takes core device handles (legacy mode: ZES_ENABLE_SYSMAN=1). */
typedef ze_device_handle_t zes_device_handle_t;
typedef struct _zes_mem_handle_t *zes_mem_handle_t;

#endif /* ACC_ZE_API_CHECK */

#define ACC_ZE_STRUCT_FIELD(S, type, name, dims) type name dims;
#define ACC_ZE_STRUCT_DEFINE(tag, fields)             \
    typedef struct ACC_ZE_OWN(_##tag) {               \
        fields(ACC_ZE_STRUCT_FIELD, tag)              \
    } ACC_ZE_OWN(tag);
ACC_ZE_STRUCTS(ACC_ZE_STRUCT_DEFINE)
#undef ACC_ZE_STRUCT_DEFINE
#undef ACC_ZE_STRUCT_FIELD

/*
 * Every driver function we call, once: X(name, parameters).  Required
 * functions exist in every spec-1.4 loader; probe fails without them.
 * The zes (Sysman) ones answer only where the driver enables Sysman.
 */
#define ACC_ZE_FUNCTIONS(X)                                                \
    X(zeInit, (ze_init_flags_t flags))                                     \
    X(zeDriverGet, (uint32_t *pCount, ze_driver_handle_t *phDrivers))      \
    X(zeDriverGetApiVersion,                                               \
      (ze_driver_handle_t hDriver, ze_api_version_t *version))             \
    X(zeDriverGetProperties,                                               \
      (ze_driver_handle_t hDriver,                                         \
       ze_driver_properties_t *pDriverProperties))                         \
    X(zeDeviceGet,                                                         \
      (ze_driver_handle_t hDriver, uint32_t *pCount,                       \
       ze_device_handle_t *phDevices))                                     \
    X(zeDeviceGetProperties,                                               \
      (ze_device_handle_t hDevice,                                         \
       ze_device_properties_t *pDeviceProperties))                         \
    X(zeDeviceGetModuleProperties,                                         \
      (ze_device_handle_t hDevice,                                         \
       ze_device_module_properties_t *pModuleProperties))                  \
    X(zeDeviceGetMemoryProperties,                                         \
      (ze_device_handle_t hDevice, uint32_t *pCount,                       \
       ze_device_memory_properties_t *pMemProperties))                     \
    X(zeDeviceGetCommandQueueGroupProperties,                              \
      (ze_device_handle_t hDevice, uint32_t *pCount,                       \
       ze_command_queue_group_properties_t *pCommandQueueGroupProperties)) \
    X(zeContextCreate,                                                     \
      (ze_driver_handle_t hDriver, const ze_context_desc_t *desc,          \
       ze_context_handle_t *phContext))                                    \
    X(zeContextDestroy, (ze_context_handle_t hContext))                    \
    X(zeCommandListCreateImmediate,                                        \
      (ze_context_handle_t hContext, ze_device_handle_t hDevice,           \
       const ze_command_queue_desc_t *altdesc,                             \
       ze_command_list_handle_t *phCommandList))                           \
    X(zeCommandListDestroy, (ze_command_list_handle_t hCommandList))       \
    X(zeCommandListAppendBarrier,                                          \
      (ze_command_list_handle_t hCommandList,                              \
       ze_event_handle_t hSignalEvent, uint32_t numWaitEvents,             \
       ze_event_handle_t *phWaitEvents))                                   \
    X(zeEventPoolCreate,                                                   \
      (ze_context_handle_t hContext, const ze_event_pool_desc_t *desc,     \
       uint32_t numDevices, ze_device_handle_t *phDevices,                 \
       ze_event_pool_handle_t *phEventPool))                               \
    X(zeEventPoolDestroy, (ze_event_pool_handle_t hEventPool))             \
    X(zeEventCreate,                                                       \
      (ze_event_pool_handle_t hEventPool, const ze_event_desc_t *desc,     \
       ze_event_handle_t *phEvent))                                        \
    X(zeEventDestroy, (ze_event_handle_t hEvent))                          \
    X(zeEventHostSynchronize,                                              \
      (ze_event_handle_t hEvent, uint64_t timeout))                        \
    X(zeEventQueryStatus, (ze_event_handle_t hEvent))                      \
    X(zeEventHostReset, (ze_event_handle_t hEvent))                        \
    X(zeEventHostSignal, (ze_event_handle_t hEvent))                       \
    X(zeEventQueryKernelTimestamp,                                         \
      (ze_event_handle_t hEvent, ze_kernel_timestamp_result_t *dstptr))    \
    X(zeMemAllocDevice,                                                    \
      (ze_context_handle_t hContext,                                       \
       const ze_device_mem_alloc_desc_t *device_desc, size_t size,         \
       size_t alignment, ze_device_handle_t hDevice, void **pptr))         \
    X(zeMemAllocHost,                                                      \
      (ze_context_handle_t hContext,                                       \
       const ze_host_mem_alloc_desc_t *host_desc, size_t size,             \
       size_t alignment, void **pptr))                                     \
    X(zeMemFree, (ze_context_handle_t hContext, void *ptr))                \
    X(zeMemGetAllocProperties,                                             \
      (ze_context_handle_t hContext, const void *ptr,                      \
       ze_memory_allocation_properties_t *pMemAllocProperties,             \
       ze_device_handle_t *phDevice))                                      \
    X(zeMemGetAddressRange,                                                \
      (ze_context_handle_t hContext, const void *ptr, void **pBase,        \
       size_t *pSize))                                                     \
    X(zeCommandListAppendMemoryCopy,                                       \
      (ze_command_list_handle_t hCommandList, void *dstptr,                \
       const void *srcptr, size_t size, ze_event_handle_t hSignalEvent,    \
       uint32_t numWaitEvents, ze_event_handle_t *phWaitEvents))           \
    X(zeCommandListAppendMemoryFill,                                       \
      (ze_command_list_handle_t hCommandList, void *ptr,                   \
       const void *pattern, size_t pattern_size, size_t size,              \
       ze_event_handle_t hSignalEvent, uint32_t numWaitEvents,             \
       ze_event_handle_t *phWaitEvents))                                   \
    X(zeCommandListCreate,                                                 \
      (ze_context_handle_t hContext, ze_device_handle_t hDevice,           \
       const ze_command_list_desc_t *desc,                                 \
       ze_command_list_handle_t *phCommandList))                           \
    X(zeCommandListClose, (ze_command_list_handle_t hCommandList))         \
    X(zeCommandListAppendEventReset,                                       \
      (ze_command_list_handle_t hCommandList, ze_event_handle_t hEvent))   \
    X(zeCommandQueueCreate,                                                \
      (ze_context_handle_t hContext, ze_device_handle_t hDevice,           \
       const ze_command_queue_desc_t *desc,                                \
       ze_command_queue_handle_t *phCommandQueue))                         \
    X(zeCommandQueueDestroy, (ze_command_queue_handle_t hCommandQueue))    \
    X(zeCommandQueueExecuteCommandLists,                                   \
      (ze_command_queue_handle_t hCommandQueue, uint32_t numCommandLists,  \
       ze_command_list_handle_t *phCommandLists, ze_fence_handle_t hFence)) \
    X(zeDeviceGetComputeProperties,                                        \
      (ze_device_handle_t hDevice,                                         \
       ze_device_compute_properties_t *pComputeProperties))                \
    X(zeModuleCreate,                                                      \
      (ze_context_handle_t hContext, ze_device_handle_t hDevice,           \
       const ze_module_desc_t *desc, ze_module_handle_t *phModule,         \
       ze_module_build_log_handle_t *phBuildLog))                          \
    X(zeModuleDestroy, (ze_module_handle_t hModule))                       \
    X(zeModuleBuildLogDestroy,                                             \
      (ze_module_build_log_handle_t hModuleBuildLog))                      \
    X(zeModuleBuildLogGetString,                                           \
      (ze_module_build_log_handle_t hModuleBuildLog, size_t *pSize,        \
       char *pBuildLog))                                                   \
    X(zeModuleGetKernelNames,                                              \
      (ze_module_handle_t hModule, uint32_t *pCount, const char **pNames)) \
    X(zeKernelCreate,                                                      \
      (ze_module_handle_t hModule, const ze_kernel_desc_t *desc,           \
       ze_kernel_handle_t *phKernel))                                      \
    X(zeKernelDestroy, (ze_kernel_handle_t hKernel))                       \
    X(zeKernelGetProperties,                                               \
      (ze_kernel_handle_t hKernel,                                         \
       ze_kernel_properties_t *pKernelProperties))                         \
    X(zeKernelSetGroupSize,                                                \
      (ze_kernel_handle_t hKernel, uint32_t groupSizeX,                    \
       uint32_t groupSizeY, uint32_t groupSizeZ))                          \
    X(zeKernelSetArgumentValue,                                            \
      (ze_kernel_handle_t hKernel, uint32_t argIndex, size_t argSize,      \
       const void *pArgValue))                                             \
    X(zeCommandListAppendLaunchKernel,                                     \
      (ze_command_list_handle_t hCommandList, ze_kernel_handle_t hKernel,  \
       const ze_group_count_t *pLaunchFuncArgs,                            \
       ze_event_handle_t hSignalEvent, uint32_t numWaitEvents,             \
       ze_event_handle_t *phWaitEvents))                                   \
    X(zesDeviceEnumMemoryModules,                                          \
      (zes_device_handle_t hDevice, uint32_t *pCount,                      \
       zes_mem_handle_t *phMemory))                                        \
    X(zesMemoryGetProperties,                                              \
      (zes_mem_handle_t hMemory, zes_mem_properties_t *pProperties))       \
    X(zesMemoryGetState,                                                   \
      (zes_mem_handle_t hMemory, zes_mem_state_t *pState))                 \
    X(zesDevicePciGetProperties,                                           \
      (zes_device_handle_t hDevice, zes_pci_properties_t *pProperties))

/*
 * The interprocess functions (spec 1.0, so every loader exports them),
 * required as those above: X(name, parameters).  A list of their own so
 * that the tests can tell them apart (tests/fake_drivers.py): they are
 * reached only through the core's interprocess API.
 */
#define ACC_ZE_IPC_FUNCTIONS(X)                                            \
    X(zeMemGetIpcHandle,                                                   \
      (ze_context_handle_t hContext, const void *ptr,                      \
       ze_ipc_mem_handle_t *pIpcHandle))                                   \
    X(zeMemOpenIpcHandle,                                                  \
      (ze_context_handle_t hContext, ze_device_handle_t hDevice,           \
       ze_ipc_mem_handle_t handle, ze_ipc_memory_flags_t flags,            \
       void **pptr))                                                       \
    X(zeMemCloseIpcHandle, (ze_context_handle_t hContext, const void *ptr)) \
    X(zeEventPoolGetIpcHandle,                                             \
      (ze_event_pool_handle_t hEventPool,                                  \
       ze_ipc_event_pool_handle_t *phIpc))                                 \
    X(zeEventPoolOpenIpcHandle,                                            \
      (ze_context_handle_t hContext, ze_ipc_event_pool_handle_t hIpc,      \
       ze_event_pool_handle_t *phEventPool))                               \
    X(zeEventPoolCloseIpcHandle, (ze_event_pool_handle_t hEventPool))

/*
 * Optional functions: X(name, spec version, parameters).  Newer than
 * spec 1.4, so loader 1.8.12 does not export them; looked up with dlsym
 * and used only when the driver also reports that spec version.
 */
#define ACC_ZE_OPTIONAL_FUNCTIONS(X)                                       \
    X(zeCommandListHostSynchronize, ACC_ZE_MAKE_VERSION(1, 6),             \
      (ze_command_list_handle_t hCommandList, uint64_t timeout))           \
    X(zeDriverGetLastErrorDescription, ACC_ZE_MAKE_VERSION(1, 6),          \
      (ze_driver_handle_t hDriver, const char **ppString))

/* Function pointer types: acc_pfn_<name>. */
#define ACC_ZE_PFN_TYPEDEF(name, params) \
    typedef ze_result_t (*acc_pfn_##name) params;
#define ACC_ZE_OPTIONAL_PFN_TYPEDEF(name, version, params) \
    typedef ze_result_t (*acc_pfn_##name) params;
ACC_ZE_FUNCTIONS(ACC_ZE_PFN_TYPEDEF)
ACC_ZE_IPC_FUNCTIONS(ACC_ZE_PFN_TYPEDEF)
ACC_ZE_OPTIONAL_FUNCTIONS(ACC_ZE_OPTIONAL_PFN_TYPEDEF)
#undef ACC_ZE_OPTIONAL_PFN_TYPEDEF
#undef ACC_ZE_PFN_TYPEDEF

/*
 * The loader's own API, not the driver's (so not in the lists above, and
 * no fault site: the test driver cannot offer it): loader 1.3.6 and later
 * export it.  Looked up with dlsym.
 */
typedef ze_result_t (*acc_pfn_zelLoaderGetVersions)(
    size_t *num_elems, zel_component_version_t *versions);

#endif /* ACC_ZE_API_H */
