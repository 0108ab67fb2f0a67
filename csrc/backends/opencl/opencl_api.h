/*
 * opencl_api.h - our own minimal declarations of the OpenCL API.
 *
 * Only what the backend (and the fault-injecting interposer in
 * tests/drivers/) use, so building needs no OpenCL SDK.
 * tests/drivers/check_opencl_api.c compiles this header together with
 * Khronos' CL/cl.h (ACC_OPENCL_API_CHECK) with -Werror, so every type,
 * constant and function signature here provably matches the standard's.
 * Entry points up to OpenCL 2.0 (clCreateCommandQueueWithProperties and
 * the shared virtual memory functions), which every ICD loader exports.
 */
#ifndef ACC_OPENCL_API_H
#define ACC_OPENCL_API_H

#include <stddef.h>
#include <stdint.h>

/* Error codes: name, value.  The backend names errors from this table. */
#define ACC_OPENCL_ERRORS(X)                                 \
    X(CL_SUCCESS, 0)                                         \
    X(CL_DEVICE_NOT_FOUND, -1)                               \
    X(CL_DEVICE_NOT_AVAILABLE, -2)                           \
    X(CL_COMPILER_NOT_AVAILABLE, -3)                         \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)                  \
    X(CL_OUT_OF_RESOURCES, -5)                               \
    X(CL_OUT_OF_HOST_MEMORY, -6)                             \
    X(CL_PROFILING_INFO_NOT_AVAILABLE, -7)                   \
    X(CL_MEM_COPY_OVERLAP, -8)                               \
    X(CL_IMAGE_FORMAT_MISMATCH, -9)                          \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10)                    \
    X(CL_BUILD_PROGRAM_FAILURE, -11)                         \
    X(CL_MAP_FAILURE, -12)                                   \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)                  \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14)     \
    X(CL_COMPILE_PROGRAM_FAILURE, -15)                       \
    X(CL_LINKER_NOT_AVAILABLE, -16)                          \
    X(CL_LINK_PROGRAM_FAILURE, -17)                          \
    X(CL_DEVICE_PARTITION_FAILED, -18)                       \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19)                 \
    X(CL_INVALID_VALUE, -30)                                 \
    X(CL_INVALID_DEVICE_TYPE, -31)                           \
    X(CL_INVALID_PLATFORM, -32)                              \
    X(CL_INVALID_DEVICE, -33)                                \
    X(CL_INVALID_CONTEXT, -34)                               \
    X(CL_INVALID_QUEUE_PROPERTIES, -35)                      \
    X(CL_INVALID_COMMAND_QUEUE, -36)                         \
    X(CL_INVALID_HOST_PTR, -37)                              \
    X(CL_INVALID_MEM_OBJECT, -38)                            \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39)               \
    X(CL_INVALID_IMAGE_SIZE, -40)                            \
    X(CL_INVALID_SAMPLER, -41)                               \
    X(CL_INVALID_BINARY, -42)                                \
    X(CL_INVALID_BUILD_OPTIONS, -43)                         \
    X(CL_INVALID_PROGRAM, -44)                               \
    X(CL_INVALID_PROGRAM_EXECUTABLE, -45)                    \
    X(CL_INVALID_KERNEL_NAME, -46)                           \
    X(CL_INVALID_KERNEL_DEFINITION, -47)                     \
    X(CL_INVALID_KERNEL, -48)                                \
    X(CL_INVALID_ARG_INDEX, -49)                             \
    X(CL_INVALID_ARG_VALUE, -50)                             \
    X(CL_INVALID_ARG_SIZE, -51)                              \
    X(CL_INVALID_KERNEL_ARGS, -52)                           \
    X(CL_INVALID_WORK_DIMENSION, -53)                        \
    X(CL_INVALID_WORK_GROUP_SIZE, -54)                       \
    X(CL_INVALID_WORK_ITEM_SIZE, -55)                        \
    X(CL_INVALID_GLOBAL_OFFSET, -56)                         \
    X(CL_INVALID_EVENT_WAIT_LIST, -57)                       \
    X(CL_INVALID_EVENT, -58)                                 \
    X(CL_INVALID_OPERATION, -59)                             \
    X(CL_INVALID_GL_OBJECT, -60)                             \
    X(CL_INVALID_BUFFER_SIZE, -61)                           \
    X(CL_INVALID_MIP_LEVEL, -62)                             \
    X(CL_INVALID_GLOBAL_WORK_SIZE, -63)                      \
    X(CL_INVALID_PROPERTY, -64)                              \
    X(CL_INVALID_IMAGE_DESCRIPTOR, -65)                      \
    X(CL_INVALID_COMPILER_OPTIONS, -66)                      \
    X(CL_INVALID_LINKER_OPTIONS, -67)                        \
    X(CL_INVALID_DEVICE_PARTITION_COUNT, -68)                \
    X(CL_INVALID_PIPE_SIZE, -69)                             \
    X(CL_INVALID_DEVICE_QUEUE, -70)                          \
    X(CL_INVALID_SPEC_ID, -71)                               \
    X(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72)                 \
    X(CL_PLATFORM_NOT_FOUND_KHR, -1001)

/* Other constants we use (macros in cl.h too). */
#define ACC_OPENCL_CONSTANTS(X)                              \
    X(CL_PLATFORM_VERSION, 0x0901)                           \
    X(CL_DEVICE_TYPE_CPU, (1 << 1))                          \
    X(CL_DEVICE_TYPE_GPU, (1 << 2))                          \
    X(CL_DEVICE_TYPE_ACCELERATOR, (1 << 3))                  \
    X(CL_DEVICE_TYPE_ALL, 0xFFFFFFFF)                        \
    X(CL_DEVICE_VENDOR_ID, 0x1001)                           \
    X(CL_DEVICE_MAX_COMPUTE_UNITS, 0x1002)                   \
    X(CL_DEVICE_GLOBAL_MEM_SIZE, 0x101F)                     \
    X(CL_DEVICE_NAME, 0x102B)                                \
    X(CL_DEVICE_HOST_UNIFIED_MEMORY, 0x1035)                 \
    X(CL_DEVICE_EXTENSIONS, 0x1030)                          \
    X(CL_QUEUE_PROFILING_ENABLE, (1 << 1))                   \
    X(CL_CONTEXT_PLATFORM, 0x1084)                           \
    X(CL_QUEUE_CONTEXT, 0x1090)                              \
    X(CL_QUEUE_DEVICE, 0x1091)                               \
    X(CL_QUEUE_PROPERTIES, 0x1093)                           \
    X(CL_EVENT_COMMAND_EXECUTION_STATUS, 0x11D3)             \
    X(CL_COMPLETE, 0x0)                                      \
    X(CL_QUEUED, 0x3)                                        \
    X(CL_PROFILING_COMMAND_END, 0x1283)                      \
    X(CL_FALSE, 0)                                           \
    X(CL_TRUE, 1)                                            \
    X(CL_MEM_READ_WRITE, (1 << 0))                           \
    X(CL_MEM_SVM_FINE_GRAIN_BUFFER, (1 << 10))               \
    X(CL_DEVICE_SVM_CAPABILITIES, 0x1053)                    \
    X(CL_DEVICE_SVM_COARSE_GRAIN_BUFFER, (1 << 0))           \
    X(CL_DEVICE_SVM_FINE_GRAIN_BUFFER, (1 << 1))             \
    X(CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, 0x1003)            \
    X(CL_DEVICE_MAX_WORK_GROUP_SIZE, 0x1004)                 \
    X(CL_DEVICE_MAX_WORK_ITEM_SIZES, 0x1005)                 \
    X(CL_DEVICE_LOCAL_MEM_SIZE, 0x1023)                      \
    X(CL_PROGRAM_KERNEL_NAMES, 0x1168)                       \
    X(CL_PROGRAM_BUILD_LOG, 0x1183)                          \
    X(CL_KERNEL_NUM_ARGS, 0x1191)                            \
    X(CL_KERNEL_ARG_ADDRESS_QUALIFIER, 0x1196)               \
    X(CL_KERNEL_ARG_TYPE_NAME, 0x1198)                       \
    X(CL_KERNEL_ARG_ADDRESS_GLOBAL, 0x119B)                  \
    X(CL_KERNEL_ARG_ADDRESS_LOCAL, 0x119C)                   \
    X(CL_KERNEL_ARG_ADDRESS_CONSTANT, 0x119D)                \
    X(CL_KERNEL_WORK_GROUP_SIZE, 0x11B0)                     \
    X(CL_KERNEL_LOCAL_MEM_SIZE, 0x11B2)                      \
    X(CL_KERNEL_PRIVATE_MEM_SIZE, 0x11B4)

#ifndef ACC_OPENCL_API_CHECK

#define ACC_OPENCL_ENUM_ENTRY(name, value) name = value,
enum {
    ACC_OPENCL_ERRORS(ACC_OPENCL_ENUM_ENTRY)
};
enum {
    ACC_OPENCL_CONSTANTS(ACC_OPENCL_ENUM_ENTRY)
};
#undef ACC_OPENCL_ENUM_ENTRY

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef cl_bitfield cl_device_type;
typedef cl_uint cl_platform_info;
typedef cl_uint cl_device_info;
typedef cl_uint cl_command_queue_info;
typedef cl_uint cl_event_info;
typedef cl_uint cl_profiling_info;
typedef cl_uint cl_bool;
typedef intptr_t cl_context_properties;
typedef cl_bitfield cl_queue_properties;
typedef cl_bitfield cl_svm_mem_flags;
typedef cl_bitfield cl_device_svm_capabilities;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_event *cl_event;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef cl_uint cl_program_info;
typedef cl_uint cl_program_build_info;
typedef cl_uint cl_kernel_info;
typedef cl_uint cl_kernel_arg_info;
typedef cl_uint cl_kernel_work_group_info;
typedef cl_uint cl_kernel_arg_address_qualifier;

#endif /* ACC_OPENCL_API_CHECK */

/* The context's error callback type (we pass NULL). */
typedef void (*acc_cl_context_notify)(const char *errinfo,
                                      const void *private_info, size_t cb,
                                      void *user_data);

/* clBuildProgram's completion callback type (we pass NULL). */
typedef void (*acc_cl_program_notify)(cl_program program, void *user_data);

/*
 * Every OpenCL function we call, once: X(name, return type, parameters).
 * All are resolved with dlsym from the ICD loader.
 */
#define ACC_OPENCL_FUNCTIONS(X)                                              \
    X(clGetPlatformIDs, cl_int,                                              \
      (cl_uint num_entries, cl_platform_id *platforms,                       \
       cl_uint *num_platforms))                                              \
    X(clGetPlatformInfo, cl_int,                                             \
      (cl_platform_id platform, cl_platform_info param_name,                 \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clGetDeviceIDs, cl_int,                                                \
      (cl_platform_id platform, cl_device_type device_type,                  \
       cl_uint num_entries, cl_device_id *devices, cl_uint *num_devices))    \
    X(clGetDeviceInfo, cl_int,                                               \
      (cl_device_id device, cl_device_info param_name,                       \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clCreateContext, cl_context,                                           \
      (const cl_context_properties *properties, cl_uint num_devices,         \
       const cl_device_id *devices, acc_cl_context_notify pfn_notify,        \
       void *user_data, cl_int *errcode_ret))                                \
    X(clReleaseContext, cl_int, (cl_context context))                        \
    X(clCreateCommandQueueWithProperties, cl_command_queue,                  \
      (cl_context context, cl_device_id device,                              \
       const cl_queue_properties *properties, cl_int *errcode_ret))          \
    X(clGetCommandQueueInfo, cl_int,                                         \
      (cl_command_queue command_queue, cl_command_queue_info param_name,     \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clRetainCommandQueue, cl_int, (cl_command_queue command_queue))        \
    X(clReleaseCommandQueue, cl_int, (cl_command_queue command_queue))       \
    X(clFlush, cl_int, (cl_command_queue command_queue))                     \
    X(clFinish, cl_int, (cl_command_queue command_queue))                    \
    X(clEnqueueMarkerWithWaitList, cl_int,                                   \
      (cl_command_queue command_queue, cl_uint num_events_in_wait_list,      \
       const cl_event *event_wait_list, cl_event *event))                    \
    X(clEnqueueBarrierWithWaitList, cl_int,                                  \
      (cl_command_queue command_queue, cl_uint num_events_in_wait_list,      \
       const cl_event *event_wait_list, cl_event *event))                    \
    X(clGetEventInfo, cl_int,                                                \
      (cl_event event, cl_event_info param_name, size_t param_value_size,    \
       void *param_value, size_t *param_value_size_ret))                     \
    X(clGetEventProfilingInfo, cl_int,                                       \
      (cl_event event, cl_profiling_info param_name,                         \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clWaitForEvents, cl_int,                                               \
      (cl_uint num_events, const cl_event *event_list))                      \
    X(clRetainEvent, cl_int, (cl_event event))                               \
    X(clReleaseEvent, cl_int, (cl_event event))                              \
    X(clSVMAlloc, void *,                                                    \
      (cl_context context, cl_svm_mem_flags flags, size_t size,              \
       cl_uint alignment))                                                   \
    X(clSVMFree, void, (cl_context context, void *svm_pointer))              \
    X(clEnqueueSVMMemcpy, cl_int,                                            \
      (cl_command_queue command_queue, cl_bool blocking_copy, void *dst_ptr, \
       const void *src_ptr, size_t size, cl_uint num_events_in_wait_list,    \
       const cl_event *event_wait_list, cl_event *event))                    \
    X(clEnqueueSVMMemFill, cl_int,                                           \
      (cl_command_queue command_queue, void *svm_ptr, const void *pattern,   \
       size_t pattern_size, size_t size, cl_uint num_events_in_wait_list,    \
       const cl_event *event_wait_list, cl_event *event))                    \
    X(clCreateProgramWithSource, cl_program,                                 \
      (cl_context context, cl_uint count, const char **strings,              \
       const size_t *lengths, cl_int *errcode_ret))                          \
    X(clBuildProgram, cl_int,                                                \
      (cl_program program, cl_uint num_devices,                              \
       const cl_device_id *device_list, const char *options,                 \
       acc_cl_program_notify pfn_notify, void *user_data))                   \
    X(clGetProgramBuildInfo, cl_int,                                         \
      (cl_program program, cl_device_id device,                              \
       cl_program_build_info param_name, size_t param_value_size,            \
       void *param_value, size_t *param_value_size_ret))                     \
    X(clGetProgramInfo, cl_int,                                              \
      (cl_program program, cl_program_info param_name,                       \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clReleaseProgram, cl_int, (cl_program program))                        \
    X(clCreateKernel, cl_kernel,                                             \
      (cl_program program, const char *kernel_name, cl_int *errcode_ret))    \
    X(clReleaseKernel, cl_int, (cl_kernel kernel))                           \
    X(clGetKernelInfo, cl_int,                                               \
      (cl_kernel kernel, cl_kernel_info param_name, size_t param_value_size, \
       void *param_value, size_t *param_value_size_ret))                     \
    X(clGetKernelArgInfo, cl_int,                                            \
      (cl_kernel kernel, cl_uint arg_index, cl_kernel_arg_info param_name,   \
       size_t param_value_size, void *param_value,                           \
       size_t *param_value_size_ret))                                        \
    X(clGetKernelWorkGroupInfo, cl_int,                                      \
      (cl_kernel kernel, cl_device_id device,                                \
       cl_kernel_work_group_info param_name, size_t param_value_size,        \
       void *param_value, size_t *param_value_size_ret))                     \
    X(clSetKernelArg, cl_int,                                                \
      (cl_kernel kernel, cl_uint arg_index, size_t arg_size,                 \
       const void *arg_value))                                               \
    X(clSetKernelArgSVMPointer, cl_int,                                      \
      (cl_kernel kernel, cl_uint arg_index, const void *arg_value))          \
    X(clEnqueueNDRangeKernel, cl_int,                                        \
      (cl_command_queue command_queue, cl_kernel kernel, cl_uint work_dim,   \
       const size_t *global_work_offset, const size_t *global_work_size,     \
       const size_t *local_work_size, cl_uint num_events_in_wait_list,       \
       const cl_event *event_wait_list, cl_event *event))

/* Function pointer types: acc_pfn_<name>. */
#define ACC_OPENCL_PFN_TYPEDEF(name, ret, params) \
    typedef ret (*acc_pfn_##name) params;
ACC_OPENCL_FUNCTIONS(ACC_OPENCL_PFN_TYPEDEF)
#undef ACC_OPENCL_PFN_TYPEDEF

#endif /* ACC_OPENCL_API_H */
