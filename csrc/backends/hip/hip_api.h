/*
 * hip_api.h - our own minimal declarations of AMD's HIP runtime API.
 *
 * Only what the backend (and the HIP test double) use, so building needs
 * no ROCm.  tests/test_hip_api_header.py compiles this header together
 * with ROCm's hip/hip_runtime_api.h (ACC_HIP_API_CHECK) with -Werror, so
 * every type, constant and function signature here provably matches
 * AMD's.  Written against ROCm 5.2 (Debian's libamdhip64-5), whose
 * library exports every function below by its plain name: there is no
 * hipGetProcAddress before ROCm 6, so the backend resolves each with
 * dlsym.
 */
#ifndef ACC_HIP_API_H
#define ACC_HIP_API_H

#include <stddef.h>
#include <stdint.h>

/* Error codes: name, value (hipError_t). */
#define ACC_HIP_RESULTS(X)                           \
    X(hipSuccess, 0)                                 \
    X(hipErrorInvalidValue, 1)                       \
    X(hipErrorOutOfMemory, 2)                        \
    X(hipErrorNotInitialized, 3)                     \
    X(hipErrorDeinitialized, 4)                      \
    X(hipErrorInvalidConfiguration, 9)               \
    X(hipErrorInvalidDevicePointer, 17)              \
    X(hipErrorInsufficientDriver, 35)                \
    X(hipErrorNoDevice, 100)                         \
    X(hipErrorInvalidDeviceFunction, 98)             \
    X(hipErrorInvalidDevice, 101)                    \
    X(hipErrorInvalidImage, 200)                     \
    X(hipErrorInvalidContext, 201)                   \
    X(hipErrorNoBinaryForGpu, 209)                   \
    X(hipErrorInvalidHandle, 400)                    \
    X(hipErrorIllegalState, 401)                     \
    X(hipErrorNotFound, 500)                         \
    X(hipErrorNotReady, 600)                         \
    X(hipErrorIllegalAddress, 700)                   \
    X(hipErrorLaunchOutOfResources, 701)             \
    X(hipErrorLaunchFailure, 719)                    \
    X(hipErrorNotSupported, 801)                     \
    X(hipErrorStreamCaptureUnsupported, 900)         \
    X(hipErrorStreamCaptureInvalidated, 901)         \
    X(hipErrorStreamCaptureUnmatched, 903)           \
    X(hipErrorStreamCaptureUnjoined, 904)            \
    X(hipErrorStreamCaptureWrongThread, 908)         \
    X(hipErrorUnknown, 999)

/* ROCm 5's hipDeviceProp_t: its size, and where its gcnArchName (256
 * chars: "gfx90a:sramecc+:xnack-", the target hiprtc compiles for) is.
 * ROCm 5.2 answers neither hipDeviceAttributeGcnArch nor
 * hipDeviceAttributeGcnArchName (hipErrorInvalidValue). */
#define ACC_HIP_DEVICE_PROP_SIZE 792
#define ACC_HIP_DEVICE_PROP_GCN_ARCH_NAME 396
#define ACC_HIP_GCN_ARCH_NAME_SIZE 256

/* Device attributes we read (hipDeviceAttribute_t). */
#define ACC_HIP_ATTRIBUTES(X)                        \
    X(hipDeviceAttributeIntegrated, 16)              \
    X(hipDeviceAttributeComputeCapabilityMajor, 23)  \
    X(hipDeviceAttributeMaxBlockDimX, 26)            \
    X(hipDeviceAttributeMaxBlockDimY, 27)            \
    X(hipDeviceAttributeMaxBlockDimZ, 28)            \
    X(hipDeviceAttributeMaxGridDimX, 29)             \
    X(hipDeviceAttributeMaxGridDimY, 30)             \
    X(hipDeviceAttributeMaxGridDimZ, 31)             \
    X(hipDeviceAttributeComputeCapabilityMinor, 61)  \
    X(hipDeviceAttributeMultiprocessorCount, 63)     \
    X(hipDeviceAttributePciBusId, 67)                \
    X(hipDeviceAttributePciDeviceId, 68)             \
    X(hipDeviceAttributePciDomainID, 69)

/* Kernel attributes we read (hipFunction_attribute, hipFuncGetAttribute). */
#define ACC_HIP_FUNC_ATTRIBUTES(X)                               \
    X(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0)               \
    X(HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 1)                   \
    X(HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 3)                    \
    X(HIP_FUNC_ATTRIBUTE_NUM_REGS, 4)                            \
    X(HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)

/* Plain integer flags (macros in hip_runtime_api.h too). */
#define ACC_HIP_FLAGS(X)                             \
    X(hipStreamDefault, 0)                           \
    X(hipStreamNonBlocking, 1)                       \
    X(hipEventDefault, 0)                            \
    X(hipEventBlockingSync, 1)                       \
    X(hipEventDisableTiming, 2)                      \
    X(hipEventInterprocess, 4)                       \
    X(hipHostMallocDefault, 0)                       \
    X(hipHostMallocPortable, 1)                      \
    X(hipIpcMemLazyEnablePeerAccess, 0)

/* hipMemoryType (hipPointerAttribute_t.memoryType). */
#define ACC_HIP_MEMORY_TYPES(X)                      \
    X(hipMemoryTypeHost, 0)                          \
    X(hipMemoryTypeDevice, 1)                        \
    X(hipMemoryTypeArray, 2)                         \
    X(hipMemoryTypeUnified, 3)

/* hipMemcpyKind. */
#define ACC_HIP_MEMCPY_KINDS(X)                      \
    X(hipMemcpyHostToHost, 0)                        \
    X(hipMemcpyHostToDevice, 1)                      \
    X(hipMemcpyDeviceToHost, 2)                      \
    X(hipMemcpyDeviceToDevice, 3)                    \
    X(hipMemcpyDefault, 4)

/* hipStreamCaptureMode and hipStreamCaptureStatus (stream capture). */
#define ACC_HIP_CAPTURE_MODES(X)                     \
    X(hipStreamCaptureModeGlobal, 0)                 \
    X(hipStreamCaptureModeThreadLocal, 1)            \
    X(hipStreamCaptureModeRelaxed, 2)
#define ACC_HIP_CAPTURE_STATUSES(X)                  \
    X(hipStreamCaptureStatusNone, 0)                 \
    X(hipStreamCaptureStatusActive, 1)               \
    X(hipStreamCaptureStatusInvalidated, 2)

/* HIP_IPC_HANDLE_SIZE: the bytes of an interprocess handle. */
#define ACC_HIP_IPC_HANDLE_SIZE 64

#ifndef ACC_HIP_API_CHECK

#define ACC_HIP_ENUM_ENTRY(name, value) name = value,
typedef enum hipError_t {
    ACC_HIP_RESULTS(ACC_HIP_ENUM_ENTRY)
} hipError_t;
typedef enum hipDeviceAttribute_t {
    ACC_HIP_ATTRIBUTES(ACC_HIP_ENUM_ENTRY)
} hipDeviceAttribute_t;
enum hipMemoryType {
    ACC_HIP_MEMORY_TYPES(ACC_HIP_ENUM_ENTRY)
};
typedef enum hipFunction_attribute {
    ACC_HIP_FUNC_ATTRIBUTES(ACC_HIP_ENUM_ENTRY)
} hipFunction_attribute;
typedef enum hipMemcpyKind {
    ACC_HIP_MEMCPY_KINDS(ACC_HIP_ENUM_ENTRY)
} hipMemcpyKind;
typedef enum hipStreamCaptureMode {
    ACC_HIP_CAPTURE_MODES(ACC_HIP_ENUM_ENTRY)
} hipStreamCaptureMode;
typedef enum hipStreamCaptureStatus {
    ACC_HIP_CAPTURE_STATUSES(ACC_HIP_ENUM_ENTRY)
} hipStreamCaptureStatus;
enum {
    ACC_HIP_FLAGS(ACC_HIP_ENUM_ENTRY)
};
#undef ACC_HIP_ENUM_ENTRY

typedef int hipDevice_t;
typedef void *hipDeviceptr_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphNode *hipGraphNode_t;
typedef struct hipGraphExec *hipGraphExec_t;
/* Read as bytes: the layout changes between ROCm versions (6 renamed it
 * hipDeviceProp_tR0600); ROCm 5's size and the one field read are below,
 * checked against the header. */
typedef struct hipDeviceProp_t hipDeviceProp_t;

/* hipIpcMemHandle_t and hipIpcEventHandle_t: the runtime's own bytes,
 * passed by value. */
typedef struct hipIpcMemHandle_st {
    char reserved[ACC_HIP_IPC_HANDLE_SIZE];
} hipIpcMemHandle_t;
typedef struct hipIpcEventHandle_st {
    char reserved[ACC_HIP_IPC_HANDLE_SIZE];
} hipIpcEventHandle_t;

typedef struct hipUUID_t {
    char bytes[16];
} hipUUID;
typedef struct hipPointerAttribute_t {
    enum hipMemoryType memoryType;
    int device;
    void *devicePointer;
    void *hostPointer;
    int isManaged;
    unsigned allocationFlags;
} hipPointerAttribute_t;

#endif /* ACC_HIP_API_CHECK */

/*
 * Every runtime function we call, once: X(name, return type, parameters)
 * (a hipError_t, but for the two that name an error).  The
 * library exports each under this name (checked against Debian's
 * libamdhip64.so.5 by tests/test_hip_real_library.py).
 */
#define ACC_HIP_FUNCTIONS(X)                                             \
    X(hipInit, hipError_t, (unsigned int flags))                         \
    X(hipDriverGetVersion, hipError_t, (int *driverVersion))             \
    X(hipGetErrorName, const char *, (hipError_t hip_error))             \
    X(hipGetErrorString, const char *, (hipError_t hipError))            \
    X(hipGetDeviceCount, hipError_t, (int *count))                       \
    X(hipSetDevice, hipError_t, (int deviceId))                          \
    X(hipGetDevice, hipError_t, (int *deviceId))                         \
    X(hipDeviceGetName, hipError_t,                                      \
      (char *name, int len, hipDevice_t device))                         \
    X(hipDeviceGetUuid, hipError_t, (hipUUID *uuid, hipDevice_t device)) \
    X(hipDeviceTotalMem, hipError_t, (size_t *bytes, hipDevice_t device)) \
    X(hipDeviceGetAttribute, hipError_t,                                 \
      (int *pi, hipDeviceAttribute_t attr, int deviceId))                \
    X(hipGetDeviceProperties, hipError_t,                                \
      (hipDeviceProp_t *prop, int deviceId))                             \
    X(hipDeviceSynchronize, hipError_t, (void))                          \
    X(hipDeviceGetStreamPriorityRange, hipError_t,                       \
      (int *leastPriority, int *greatestPriority))                       \
    X(hipStreamCreateWithPriority, hipError_t,                           \
      (hipStream_t *stream, unsigned int flags, int priority))           \
    X(hipStreamQuery, hipError_t, (hipStream_t stream))                  \
    X(hipStreamSynchronize, hipError_t, (hipStream_t stream))            \
    X(hipStreamWaitEvent, hipError_t,                                    \
      (hipStream_t stream, hipEvent_t event, unsigned int flags))        \
    X(hipStreamDestroy, hipError_t, (hipStream_t stream))                \
    X(hipEventCreateWithFlags, hipError_t,                               \
      (hipEvent_t *event, unsigned flags))                               \
    X(hipEventRecord, hipError_t, (hipEvent_t event, hipStream_t stream)) \
    X(hipEventQuery, hipError_t, (hipEvent_t event))                     \
    X(hipEventSynchronize, hipError_t, (hipEvent_t event))               \
    X(hipEventElapsedTime, hipError_t,                                   \
      (float *ms, hipEvent_t start, hipEvent_t stop))                    \
    X(hipEventDestroy, hipError_t, (hipEvent_t event))                   \
    X(hipMemGetInfo, hipError_t, (size_t *free, size_t *total))          \
    X(hipMalloc, hipError_t, (void **ptr, size_t size))                  \
    X(hipFree, hipError_t, (void *ptr))                                  \
    X(hipHostMalloc, hipError_t,                                         \
      (void **ptr, size_t size, unsigned int flags))                     \
    X(hipHostFree, hipError_t, (void *ptr))                              \
    X(hipMemcpyAsync, hipError_t,                                        \
      (void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind, \
       hipStream_t stream))                                              \
    X(hipMemcpyPeerAsync, hipError_t,                                    \
      (void *dst, int dstDeviceId, const void *src, int srcDevice,       \
       size_t sizeBytes, hipStream_t stream))                            \
    X(hipMemsetD8Async, hipError_t,                                      \
      (hipDeviceptr_t dest, unsigned char value, size_t count,           \
       hipStream_t stream))                                              \
    X(hipPointerGetAttributes, hipError_t,                               \
      (hipPointerAttribute_t *attributes, const void *ptr))              \
    X(hipMemGetAddressRange, hipError_t,                                 \
      (hipDeviceptr_t *pbase, size_t *psize, hipDeviceptr_t dptr))       \
    X(hipStreamIsCapturing, hipError_t,                                  \
      (hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus))      \
    X(hipStreamBeginCapture, hipError_t,                                 \
      (hipStream_t stream, hipStreamCaptureMode mode))                   \
    X(hipStreamEndCapture, hipError_t,                                   \
      (hipStream_t stream, hipGraph_t *pGraph))                          \
    X(hipGraphInstantiate, hipError_t,                                   \
      (hipGraphExec_t *pGraphExec, hipGraph_t graph,                     \
       hipGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize)) \
    X(hipGraphLaunch, hipError_t,                                        \
      (hipGraphExec_t graphExec, hipStream_t stream))                    \
    X(hipGraphExecDestroy, hipError_t, (hipGraphExec_t graphExec))       \
    X(hipGraphDestroy, hipError_t, (hipGraph_t graph))                   \
    X(hipModuleLoadData, hipError_t,                                     \
      (hipModule_t *module, const void *image))                          \
    X(hipModuleUnload, hipError_t, (hipModule_t module))                 \
    X(hipModuleGetFunction, hipError_t,                                  \
      (hipFunction_t *function, hipModule_t module, const char *kname))  \
    X(hipFuncGetAttribute, hipError_t,                                   \
      (int *value, hipFunction_attribute attrib, hipFunction_t hfunc))   \
    X(hipModuleLaunchKernel, hipError_t,                                 \
      (hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,    \
       unsigned int gridDimZ, unsigned int blockDimX,                    \
       unsigned int blockDimY, unsigned int blockDimZ,                   \
       unsigned int sharedMemBytes, hipStream_t stream,                  \
       void **kernelParams, void **extra))

/*
 * The interprocess functions (backend.h's ipc slots), resolved as the
 * others are: a list of their own so that the tests of faults, which
 * reach every function of ACC_HIP_FUNCTIONS through the Python API, take
 * them up once that API shares memory (tests/fake_drivers.py, HipDouble).
 * hipIpcOpenMemHandle and hipIpcOpenEventHandle take the handle by value.
 */
#define ACC_HIP_IPC_FUNCTIONS(X)                                         \
    X(hipIpcGetMemHandle, hipError_t,                                    \
      (hipIpcMemHandle_t *handle, void *devPtr))                         \
    X(hipIpcOpenMemHandle, hipError_t,                                   \
      (void **devPtr, hipIpcMemHandle_t handle, unsigned int flags))     \
    X(hipIpcCloseMemHandle, hipError_t, (void *devPtr))                  \
    X(hipIpcGetEventHandle, hipError_t,                                  \
      (hipIpcEventHandle_t *handle, hipEvent_t event))                   \
    X(hipIpcOpenEventHandle, hipError_t,                                 \
      (hipEvent_t *event, hipIpcEventHandle_t handle))

/* Function pointer types: acc_pfn_<name>. */
#define ACC_HIP_PFN_TYPEDEF(name, ret, params) \
    typedef ret (*acc_pfn_##name) params;
ACC_HIP_FUNCTIONS(ACC_HIP_PFN_TYPEDEF)
ACC_HIP_IPC_FUNCTIONS(ACC_HIP_PFN_TYPEDEF)
#undef ACC_HIP_PFN_TYPEDEF

#endif /* ACC_HIP_API_H */
