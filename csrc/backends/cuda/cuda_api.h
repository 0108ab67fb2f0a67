/*
 * cuda_api.h - our own minimal declarations of the CUDA Driver API.
 *
 * Only what the backend (and the driver test double) use, so building needs
 * no CUDA toolkit.  tests/test_cuda_api_header.py compiles this header
 * together with the toolkit's cuda.h (ACC_CUDA_API_CHECK) with -Werror, so
 * every type, constant and function signature here provably matches
 * NVIDIA's.
 */
#ifndef ACC_CUDA_API_H
#define ACC_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/*
 * The ABI version we are written against (1000 * major + 10 * minor): the
 * version passed to cuGetProcAddress, so that each base name resolves to
 * the variant (_v2 ...) whose signature is declared below.
 */
#define ACC_CUDA_ABI_VERSION 12000

/* Result codes: name, value. */
#define ACC_CUDA_RESULTS(X)                          \
    X(CUDA_SUCCESS, 0)                               \
    X(CUDA_ERROR_INVALID_VALUE, 1)                   \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                   \
    X(CUDA_ERROR_NOT_INITIALIZED, 3)                 \
    X(CUDA_ERROR_DEINITIALIZED, 4)                   \
    X(CUDA_ERROR_STUB_LIBRARY, 34)                   \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46)             \
    X(CUDA_ERROR_NO_DEVICE, 100)                     \
    X(CUDA_ERROR_INVALID_DEVICE, 101)                \
    X(CUDA_ERROR_INVALID_IMAGE, 200)                 \
    X(CUDA_ERROR_INVALID_CONTEXT, 201)               \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)             \
    X(CUDA_ERROR_INVALID_PTX, 218)                   \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)       \
    X(CUDA_ERROR_INVALID_HANDLE, 400)                \
    X(CUDA_ERROR_NOT_FOUND, 500)                     \
    X(CUDA_ERROR_NOT_READY, 600)                     \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)               \
    X(CUDA_ERROR_LAUNCH_FAILED, 719)                 \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708)        \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709)          \
    X(CUDA_ERROR_NOT_SUPPORTED, 801)                 \
    X(CUDA_ERROR_ILLEGAL_STATE, 401)                 \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900)    \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901)    \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, 903)      \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, 904)       \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, 908)   \
    X(CUDA_ERROR_UNKNOWN, 999)

/* Device attributes we read. */
#define ACC_CUDA_ATTRIBUTES(X)                                \
    X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1)           \
    X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 2)                 \
    X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 3)                 \
    X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 4)                 \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5)                  \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 6)                  \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 7)                  \
    X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 8)     \
    X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 97) \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)           \
    X(CU_DEVICE_ATTRIBUTE_INTEGRATED, 18)                     \
    X(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 33)                     \
    X(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 34)                  \
    X(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 50)                  \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)       \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)       \
    X(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 78)
/* Device attributes only the driver double answers, for peers that run on
 * it (cuda.core asks them before choosing how to allocate). */
#define ACC_CUDA_PEER_ATTRIBUTES(X)                           \
    X(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 41)             \
    X(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 115)        \
    X(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 119) \
    X(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, 142) \
    X(CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 144)

/* Kernel (function) attributes we read (cuFuncGetAttribute). */
#define ACC_CUDA_FUNC_ATTRIBUTES(X)                           \
    X(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0)             \
    X(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 1)                 \
    X(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, 2)                  \
    X(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 3)                  \
    X(CU_FUNC_ATTRIBUTE_NUM_REGS, 4)                          \
    X(CU_FUNC_ATTRIBUTE_PTX_VERSION, 5)                       \
    X(CU_FUNC_ATTRIBUTE_BINARY_VERSION, 6)                    \
    X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)

/* Options of cuModuleLoadDataEx (the JIT's) we pass: the logs. */
#define ACC_CUDA_JIT_OPTIONS(X)                               \
    X(CU_JIT_INFO_LOG_BUFFER, 3)                              \
    X(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, 4)                   \
    X(CU_JIT_ERROR_LOG_BUFFER, 5)                             \
    X(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 6)

/* cuGetProcAddress symbol status. */
#define ACC_CUDA_PROC_STATUS(X)                              \
    X(CU_GET_PROC_ADDRESS_SUCCESS, 0)                        \
    X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)               \
    X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)

/* Plain integer flags (macros in cuda.h too). */
#define ACC_CUDA_FLAGS(X)                                    \
    X(CU_GET_PROC_ADDRESS_DEFAULT, 0)                        \
    X(CU_STREAM_DEFAULT, 0)                                  \
    X(CU_STREAM_NON_BLOCKING, 1)                             \
    X(CU_EVENT_DEFAULT, 0)                                   \
    X(CU_EVENT_BLOCKING_SYNC, 1)                             \
    X(CU_EVENT_DISABLE_TIMING, 2)                            \
    X(CU_EVENT_INTERPROCESS, 4)                              \
    X(CU_MEMHOSTALLOC_PORTABLE, 1)                           \
    X(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, 1)

/* Stream capture modes and statuses. */
#define ACC_CUDA_CAPTURE_MODES(X)                            \
    X(CU_STREAM_CAPTURE_MODE_GLOBAL, 0)                      \
    X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1)                \
    X(CU_STREAM_CAPTURE_MODE_RELAXED, 2)
#define ACC_CUDA_CAPTURE_STATUS(X)                           \
    X(CU_STREAM_CAPTURE_STATUS_NONE, 0)                      \
    X(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1)                    \
    X(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)

/* cuPointerGetAttribute attributes and memory types we read. */
#define ACC_CUDA_POINTER_ATTRIBUTES(X)                       \
    X(CU_POINTER_ATTRIBUTE_CONTEXT, 1)                       \
    X(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 2)                   \
    X(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 9)
/* The others cuPointerGetAttributes answers (the driver double only). */
#define ACC_CUDA_PEER_POINTER_ATTRIBUTES(X)                  \
    X(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, 3)                \
    X(CU_POINTER_ATTRIBUTE_HOST_POINTER, 4)                  \
    X(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 6)                   \
    X(CU_POINTER_ATTRIBUTE_BUFFER_ID, 7)                     \
    X(CU_POINTER_ATTRIBUTE_IS_MANAGED, 8)                    \
    X(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, 10)   \
    X(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, 11)             \
    X(CU_POINTER_ATTRIBUTE_RANGE_SIZE, 12)                   \
    X(CU_POINTER_ATTRIBUTE_MAPPED, 13)                       \
    X(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, 14)         \
    X(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, 17)               \
    X(CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, 21)
#define ACC_CUDA_MEMORY_TYPES(X)                             \
    X(CU_MEMORYTYPE_HOST, 1)                                 \
    X(CU_MEMORYTYPE_DEVICE, 2)                               \
    X(CU_MEMORYTYPE_ARRAY, 3)                                \
    X(CU_MEMORYTYPE_UNIFIED, 4)

#ifndef ACC_CUDA_API_CHECK

#define ACC_CUDA_ENUM_ENTRY(name, value) name = value,
typedef enum cudaError_enum {
    ACC_CUDA_RESULTS(ACC_CUDA_ENUM_ENTRY)
} CUresult;
typedef enum CUdevice_attribute_enum {
    ACC_CUDA_ATTRIBUTES(ACC_CUDA_ENUM_ENTRY)
    ACC_CUDA_PEER_ATTRIBUTES(ACC_CUDA_ENUM_ENTRY)
} CUdevice_attribute;
typedef enum CUfunction_attribute_enum {
    ACC_CUDA_FUNC_ATTRIBUTES(ACC_CUDA_ENUM_ENTRY)
} CUfunction_attribute;
typedef enum CUjit_option_enum {
    ACC_CUDA_JIT_OPTIONS(ACC_CUDA_ENUM_ENTRY)
} CUjit_option;
typedef enum CUpointer_attribute_enum {
    ACC_CUDA_POINTER_ATTRIBUTES(ACC_CUDA_ENUM_ENTRY)
    ACC_CUDA_PEER_POINTER_ATTRIBUTES(ACC_CUDA_ENUM_ENTRY)
} CUpointer_attribute;
typedef enum CUmemorytype_enum {
    ACC_CUDA_MEMORY_TYPES(ACC_CUDA_ENUM_ENTRY)
} CUmemorytype;
typedef enum CUdriverProcAddressQueryResult_enum {
    ACC_CUDA_PROC_STATUS(ACC_CUDA_ENUM_ENTRY)
} CUdriverProcAddressQueryResult;
enum {
    ACC_CUDA_FLAGS(ACC_CUDA_ENUM_ENTRY)
};
typedef enum CUstreamCaptureMode_enum {
    ACC_CUDA_CAPTURE_MODES(ACC_CUDA_ENUM_ENTRY)
} CUstreamCaptureMode;
typedef enum CUstreamCaptureStatus_enum {
    ACC_CUDA_CAPTURE_STATUS(ACC_CUDA_ENUM_ENTRY)
} CUstreamCaptureStatus;
#undef ACC_CUDA_ENUM_ENTRY

typedef uint64_t cuuint64_t;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
/* A device address (64-bit builds only, as cuda.h's CUdeviceptr_v2). */
typedef unsigned long long CUdeviceptr;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
/* Interprocess handles: 64 opaque bytes, passed by value to the open
 * functions. */
typedef struct CUipcMemHandle_st {
    char reserved[64];
} CUipcMemHandle;
typedef struct CUipcEventHandle_st {
    char reserved[64];
} CUipcEventHandle;

#endif /* ACC_CUDA_API_CHECK */

/*
 * Every driver function we call, once:
 *   X(base name, versioned symbol for dlsym, ABI version, parameters)
 * The versioned symbol is what the base name means at
 * ACC_CUDA_ABI_VERSION; it is used only when cuGetProcAddress is missing.
 * cuGetProcAddress itself is looked up with dlsym and is not listed.
 */
#define ACC_CUDA_FUNCTIONS(X)                                               \
    X(cuInit, cuInit, 2000, (unsigned int Flags))                           \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, (int *driverVersion))   \
    X(cuGetErrorName, cuGetErrorName, 6000,                                 \
      (CUresult error, const char **pStr))                                  \
    X(cuGetErrorString, cuGetErrorString, 6000,                             \
      (CUresult error, const char **pStr))                                  \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, (int *count))               \
    X(cuDeviceGet, cuDeviceGet, 2000, (CUdevice *device, int ordinal))      \
    X(cuDeviceGetName, cuDeviceGetName, 2000,                               \
      (char *name, int len, CUdevice dev))                                  \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040,                           \
      (CUuuid *uuid, CUdevice dev))                                         \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020,                          \
      (size_t *bytes, CUdevice dev))                                        \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000,                     \
      (int *pi, CUdevice_attribute attrib, CUdevice dev))                   \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000,             \
      (CUcontext *pctx, CUdevice dev))                                      \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000,       \
      (CUdevice dev))                                                       \
    X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000,         \
      (CUdevice dev, unsigned int *flags, int *active))                     \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext ctx))              \
    X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, (CUcontext *pctx))            \
    X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, (CUcontext ctx))         \
    X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, (CUcontext *pctx))         \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, (void))                     \
    X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050,       \
      (int *leastPriority, int *greatestPriority))                          \
    X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050,         \
      (CUstream *phStream, unsigned int flags, int priority))               \
    X(cuStreamQuery, cuStreamQuery, 2000, (CUstream hStream))               \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, (CUstream hStream))   \
    X(cuStreamWaitEvent, cuStreamWaitEvent, 3020,                           \
      (CUstream hStream, CUevent hEvent, unsigned int Flags))               \
    X(cuStreamDestroy, cuStreamDestroy_v2, 4000, (CUstream hStream))        \
    X(cuEventCreate, cuEventCreate, 2000,                                   \
      (CUevent *phEvent, unsigned int Flags))                               \
    X(cuEventRecord, cuEventRecord, 2000, (CUevent hEvent, CUstream hStream)) \
    X(cuEventQuery, cuEventQuery, 2000, (CUevent hEvent))                   \
    X(cuEventSynchronize, cuEventSynchronize, 2000, (CUevent hEvent))       \
    X(cuEventElapsedTime, cuEventElapsedTime, 2000,                         \
      (float *pMilliseconds, CUevent hStart, CUevent hEnd))                 \
    X(cuEventDestroy, cuEventDestroy_v2, 4000, (CUevent hEvent))            \
    X(cuMemGetInfo, cuMemGetInfo_v2, 3020, (size_t *free, size_t *total))  \
    X(cuMemAlloc, cuMemAlloc_v2, 3020,                                      \
      (CUdeviceptr *dptr, size_t bytesize))                                 \
    X(cuMemFree, cuMemFree_v2, 3020, (CUdeviceptr dptr))                    \
    X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020,                  \
      (CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr))                \
    X(cuMemHostAlloc, cuMemHostAlloc, 2020,                                 \
      (void **pp, size_t bytesize, unsigned int Flags))                     \
    X(cuMemFreeHost, cuMemFreeHost, 2000, (void *p))                        \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020,                        \
      (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,        \
       CUstream hStream))                                                   \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020,                        \
      (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,              \
       CUstream hStream))                                                   \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020,                        \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,      \
       CUstream hStream))                                                   \
    X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000,                           \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,  \
       CUcontext srcContext, size_t ByteCount, CUstream hStream))           \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020,                               \
      (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)) \
    X(cuPointerGetAttribute, cuPointerGetAttribute, 4000,                   \
      (void *data, CUpointer_attribute attribute, CUdeviceptr ptr))          \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010,                 \
      (CUstream hStream, CUstreamCaptureMode mode))                         \
    X(cuStreamEndCapture, cuStreamEndCapture, 10000,                        \
      (CUstream hStream, CUgraph *phGraph))                                 \
    X(cuStreamIsCapturing, cuStreamIsCapturing, 10000,                      \
      (CUstream hStream, CUstreamCaptureStatus *captureStatus))             \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040,      \
      (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)) \
    X(cuGraphLaunch, cuGraphLaunch, 10000,                                  \
      (CUgraphExec hGraphExec, CUstream hStream))                           \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000,                        \
      (CUgraphExec hGraphExec))                                             \
    X(cuGraphDestroy, cuGraphDestroy, 10000, (CUgraph hGraph))             \
    X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010,                         \
      (CUmodule *module, const void *image, unsigned int numOptions,        \
       CUjit_option *options, void **optionValues))                         \
    X(cuModuleUnload, cuModuleUnload, 2000, (CUmodule hmod))                \
    X(cuModuleGetFunction, cuModuleGetFunction, 2000,                       \
      (CUfunction *hfunc, CUmodule hmod, const char *name))                 \
    X(cuFuncGetAttribute, cuFuncGetAttribute, 2020,                         \
      (int *pi, CUfunction_attribute attrib, CUfunction hfunc))             \
    X(cuLaunchKernel, cuLaunchKernel, 4000,                                 \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,          \
       unsigned int gridDimZ, unsigned int blockDimX,                       \
       unsigned int blockDimY, unsigned int blockDimZ,                      \
       unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,  \
       void **extra))

/*
 * Functions newer than ACC_CUDA_ABI_VERSION that the backend uses where
 * the driver has them (listed as above; each is asked for at its own
 * version, and a driver too old for it leaves it NULL).
 */
#define ACC_CUDA_OPTIONAL_FUNCTIONS(X)                                      \
    X(cuFuncGetName, cuFuncGetName, 12030,                                  \
      (const char **name, CUfunction hfunc))                                \
    X(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040,                        \
      (CUfunction func, size_t paramIndex, size_t *paramOffset,             \
       size_t *paramSize))                                                  \
    X(cuModuleGetFunctionCount, cuModuleGetFunctionCount, 12040,            \
      (unsigned int *count, CUmodule mod))                                  \
    X(cuModuleEnumerateFunctions, cuModuleEnumerateFunctions, 12040,        \
      (CUfunction *functions, unsigned int numFunctions, CUmodule mod))

/*
 * Functions only the driver double exports, for peers that run on it
 * (cuda.core, cuda.bindings); the backend never calls them.  Listed as
 * above (the double exports cuStreamGetCtx_v2 of CUDA 12.5 too).
 */
#define ACC_CUDA_PEER_FUNCTIONS(X)                                          \
    X(cuCtxGetDevice, cuCtxGetDevice, 2000, (CUdevice *device))             \
    X(cuStreamGetCtx, cuStreamGetCtx, 9020,                                 \
      (CUstream hStream, CUcontext *pctx))                                  \
    X(cuMemAllocHost, cuMemAllocHost_v2, 3020,                              \
      (void **pp, size_t bytesize))                                         \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000,                                   \
      (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,                  \
       CUstream hStream))                                                   \
    X(cuPointerGetAttributes, cuPointerGetAttributes, 7000,                 \
      (unsigned int numAttributes, CUpointer_attribute *attributes,        \
       void **data, CUdeviceptr ptr))                                       \
    X(cuModuleLoadData, cuModuleLoadData, 2000,                             \
      (CUmodule *module, const void *image))

/*
 * The interprocess functions (ipc slots), listed as ACC_CUDA_FUNCTIONS and
 * resolved the same way (every driver the backend accepts has them); a
 * list of their own so that the fault tests take them up with the core's
 * interprocess API.  cuIpcOpenMemHandle is cuIpcOpenMemHandle_v2 since
 * CUDA 11.0 (the same signature).
 */
#define ACC_CUDA_IPC_FUNCTIONS(X)                                           \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010,                           \
      (CUipcMemHandle *pHandle, CUdeviceptr dptr))                          \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000,                     \
      (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags))      \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, (CUdeviceptr dptr))   \
    X(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010,                       \
      (CUipcEventHandle *pHandle, CUevent event))                           \
    X(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010,                     \
      (CUevent *phEvent, CUipcEventHandle handle))

/* Function pointer types: acc_pfn_<base name>. */
#define ACC_CUDA_PFN_TYPEDEF(name, symbol, version, params) \
    typedef CUresult (*acc_pfn_##name) params;
ACC_CUDA_FUNCTIONS(ACC_CUDA_PFN_TYPEDEF)
ACC_CUDA_IPC_FUNCTIONS(ACC_CUDA_PFN_TYPEDEF)
ACC_CUDA_OPTIONAL_FUNCTIONS(ACC_CUDA_PFN_TYPEDEF)
#undef ACC_CUDA_PFN_TYPEDEF

typedef CUresult (*acc_pfn_cuGetProcAddress)(
    const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus);

#endif /* ACC_CUDA_API_H */
