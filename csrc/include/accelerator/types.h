/*
 * accelerator/types.h - the base types and helpers that every layer may
 * use: the status codes, the error record, the objects a backend works on
 * as it sees them (streams, events, device properties, copies, kernels),
 * the capability and format enums, and the formatting helpers.  No
 * Python, no driver, no core API: backends (accelerator/backend.h, which
 * includes this) compile against it alone, in the tree or outside it.
 *
 * Installed with the package: accelerator.get_include() names the folder
 * above accelerator/.  The helpers at the end are static inline, so that
 * a backend built as a separate shared object links against no symbol of
 * the core.
 */
#ifndef ACCELERATOR_TYPES_H
#define ACCELERATOR_TYPES_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most devices one backend may expose; more are ignored (traced). */
#define ACC_MAX_DEVICES 64

typedef enum acc_status {
    ACC_OK = 0,
    ACC_NOT_READY,            /* query: work still pending; not an error */
    ACC_ERR_NO_ACCELERATOR,   /* no backend is available */
    ACC_ERR_INVALID_ARGUMENT, /* bad value from the caller -> ValueError */
    ACC_ERR_DEVICE_INDEX,     /* index outside [0, count) -> DeviceIndexError */
    ACC_ERR_UNSUPPORTED,      /* the backend lacks the operation */
    ACC_ERR_DRIVER,           /* a driver call failed -> AcceleratorError */
    ACC_ERR_OUT_OF_MEMORY,    /* device memory exhausted -> OutOfMemoryError */
    ACC_ERR_HOST_MEMORY,      /* malloc failed -> MemoryError */
    ACC_ERR_STATE,            /* object not in a state for this -> RuntimeError */
    ACC_ERR_FORKED,           /* used in a child forked after init */
    ACC_ERR_BUILD,            /* device code failed to build -> BuildError */
    ACC_ERR_NOT_FOUND,        /* no such name (a kernel) -> KeyError */
} acc_status;

/* Filled on failure.  Strings are static (or copied into message). */
typedef struct acc_error {
    acc_status status;
    const char *backend;   /* the backend's device type, or NULL */
    const char *api;       /* the failing driver function, or NULL */
    long long code;        /* the driver's code (0 when none) */
    const char *code_name; /* the driver's name for code, or NULL */
    char message[512];     /* a full sentence for the user */
} acc_error;

typedef struct acc_backend acc_backend;

/*
 * A stream: a native queue of work on one device.  Reference counted
 * because a thread's "current stream" slot and the Python object that
 * wraps it both keep it alive.  Default streams are never freed.
 */
typedef struct acc_stream {
    _Atomic int refcount;         /* see acc_stream_incref */
    const acc_backend *backend;
    int device;
    int priority;                 /* the driver's priority, as created */
    unsigned flags;               /* ACC_STREAM_* */
    uintptr_t handle;             /* the native handle, as users see it */
    void *native;                 /* backend data */
    /* The Python layer's borrowed back-pointer to the object that one
     * module instance (wrapper_owner, never 0) hands out for this
     * stream; other instances keep theirs in their own state. */
    void *wrapper;
    unsigned long long wrapper_owner;
} acc_stream;

enum {
    ACC_STREAM_DEFAULT = 1u << 0,  /* the device's default stream */
    ACC_STREAM_EXTERNAL = 1u << 1, /* made by another library: not ours */
};

/*
 * An event.  The native event is created on first record, on the
 * recording stream's device; until then device is -1 and native NULL.
 * state says which: the first record moves it from ACC_EVENT_UNMADE to
 * ACC_EVENT_MAKING (one thread wins; the others wait for it, holding no
 * lock) and publishes backend, device, handle and native with
 * ACC_EVENT_MADE, or goes back to ACC_EVENT_UNMADE when the driver
 * refuses.  Read the other fields only once acc_event_made() is true.
 */
typedef struct acc_event {
    _Atomic int state;            /* ACC_EVENT_UNMADE, _MAKING, _MADE */
    const acc_backend *backend;
    int device;
    unsigned flags;               /* ACC_EVENT_* */
    uintptr_t handle;             /* native handle, 0 before first record */
    void *native;
} acc_event;

enum {
    ACC_EVENT_UNMADE = 0,
    ACC_EVENT_MAKING = 1,
    ACC_EVENT_MADE = 2,
};

enum {
    ACC_EVENT_TIMING = 1u << 0,   /* can measure elapsed time */
    ACC_EVENT_BLOCKING = 1u << 1, /* synchronize() blocks the thread */
    /* Can be shared with other processes (ipc_event_export); never
     * timing.  An event opened from another process's handle
     * (ipc_event_open) has ACC_EVENT_INTERPROCESS | ACC_EVENT_IMPORTED. */
    ACC_EVENT_INTERPROCESS = 1u << 2,
    ACC_EVENT_IMPORTED = 1u << 3,
};

/* The driver's handle to memory or an event that another process of the
 * machine can open (backend.h's ipc slots): the driver's own bytes (CUDA's
 * and HIP's 64-byte handles, Level Zero's zeIpcMemHandle_t), and where
 * the driver's handle rests on a file descriptor (Level Zero on Linux),
 * that descriptor: fd, -1 where the handle needs none.  The core moves
 * the descriptor between processes itself (SCM_RIGHTS, pidfd_getfd); the
 * bytes travel as they are. */
#define ACC_IPC_HANDLE_SIZE 64
typedef struct acc_ipc_handle {
    unsigned char bytes[ACC_IPC_HANDLE_SIZE];
    int fd;
} acc_ipc_handle;

/* Static facts about one device, read once and cached by the caller. */
typedef struct acc_device_properties {
    char name[256];
    unsigned char uuid[16];
    unsigned long long total_memory; /* bytes */
    char pci_bus_id[32];             /* "dddd:bb:dd.f", "" if unknown */
    int multi_processor_count;       /* SMs (CUDA); EUs (Level Zero) */
    int major, minor;                /* compute capability; -1 if none */
    unsigned vendor_id, device_id;   /* PCI ids; 0 if unknown */
    int integrated;                  /* shares memory with the host */
    unsigned estimates;              /* ACC_ESTIMATE_*: numbers guessed */
    unsigned float_types;            /* ACC_FLOAT_*: what the driver says
                                      * the device computes in, besides
                                      * 32-bit floats */
} acc_device_properties;

/* Floating-point types a device supports beyond float32, as its driver
 * reports them (get_device_capability). */
enum {
    ACC_FLOAT_16 = 1u << 0,   /* IEEE half: float16 */
    ACC_FLOAT_BF16 = 1u << 1, /* bfloat16 */
    ACC_FLOAT_64 = 1u << 2,   /* double: float64 (and complex128) */
};

enum {
    /* acc_memory_info's free bytes are the total: the driver cannot say
     * (Level Zero without Sysman). */
    ACC_ESTIMATE_FREE_MEMORY = 1u << 0,
};

/* What the selected backend's handles and memory are (acc_backend.caps). */
enum {
    /* Native stream handles speak the CUDA stream protocol
     * (__cuda_stream__, from_handle of CUstream). */
    ACC_CAP_CUDA_STREAM_PROTOCOL = 1u << 0,
    /* 0 is a valid native stream handle (CUDA: the legacy default
     * stream); otherwise Stream.from_handle(0) is refused. */
    ACC_CAP_NULL_STREAM_HANDLE = 1u << 1,
    /* mem_alloc returns handles, not device addresses (OpenCL's cl_mem):
     * an address inside an allocation means nothing, so the allocator
     * cannot carve blocks out of segments and works directly. */
    ACC_CAP_MEMORY_HANDLES = 1u << 2,
    /* stream_query may not see work that others queued through the
     * handle (Level Zero before spec 1.6, backend.h): a free in direct
     * mode waits behind an event even where the query says idle. */
    ACC_CAP_PARTIAL_QUERY = 1u << 3,
    /* DLPack's ROCm stream values for __dlpack__(stream=): None and 0
     * are the default stream, 1 and 2 are no streams, any other int a
     * stream handle (hipStream_t) the consumer vouches for. */
    ACC_CAP_ROCM_STREAM_PROTOCOL = 1u << 4,
};

/* One copy (backend.h mem_copy).  Host sides are host pointers cast to
 * uintptr_t; their device is -1. */
typedef enum acc_copy_kind {
    ACC_COPY_H2D,   /* host to device */
    ACC_COPY_D2H,   /* device to host */
    ACC_COPY_D2D,   /* within one device */
    ACC_COPY_PEER,  /* between two devices of the backend */
} acc_copy_kind;

enum {
    /* The host side is ordinary (pageable) memory: the call returns only
     * when it may be reused. */
    ACC_COPY_PAGEABLE = 1u << 0,
};

typedef struct acc_copy {
    acc_copy_kind kind;
    unsigned flags;          /* ACC_COPY_* */
    uintptr_t dst, src;
    int dst_device, src_device;
    size_t nbytes;
} acc_copy;

/* What pointer_info learns about a foreign pointer. */
typedef enum acc_pointer_kind {
    ACC_POINTER_UNKNOWN = 0, /* not memory this backend's driver knows */
    ACC_POINTER_DEVICE,      /* device memory of `device` */
    ACC_POINTER_HOST,        /* host memory registered with the driver */
    ACC_POINTER_SHARED,      /* managed/shared memory */
} acc_pointer_kind;

typedef struct acc_pointer_info {
    acc_pointer_kind kind;
    int device;              /* -1 unless known */
} acc_pointer_info;

/* Capture modes, as CUDA's CUstreamCaptureMode and torch's
 * capture_error_mode ("default" is global). */
enum {
    ACC_CAPTURE_GLOBAL = 0,
    ACC_CAPTURE_THREAD_LOCAL = 1,
    ACC_CAPTURE_RELAXED = 2,
};


/* Kernels ------------------------------------------------------------ */

/* The formats of device code (Module(format=)); ACC_FORMAT_NONE: recognise
 * it from the bytes (acc_code_format_of). */
typedef enum acc_code_format {
    ACC_FORMAT_NONE = 0,
    ACC_FORMAT_PTX,          /* NVIDIA PTX text */
    ACC_FORMAT_CUBIN,        /* CUDA device ELF */
    ACC_FORMAT_FATBIN,       /* CUDA fat binary */
    ACC_FORMAT_SPIRV,        /* SPIR-V binary (magic 0x07230203) */
    ACC_FORMAT_OPENCL_C,     /* OpenCL C source, built by the driver */
    ACC_FORMAT_HSACO,        /* AMD code object (ELF) */
    ACC_FORMAT_NATIVE,       /* the device's own binary, as its driver
                              * takes it (the test doubles: a host shared
                              * object, docs/kernels.rst) */
    /* Source that a backend's compiler (backend.h: compile) turns into
     * one of the formats above before module_load sees it (ABI 1.1). */
    ACC_FORMAT_CUDA_CXX,     /* CUDA C++, compiled by NVRTC */
    ACC_FORMAT_HIP_CXX,      /* HIP C++, compiled by hiprtc */
    ACC_FORMAT_COUNT,
} acc_code_format;

#define ACC_FORMAT_BIT(f) (1u << (f))

/* What a parameter of a kernel is, where the driver (or the code) tells. */
typedef enum acc_param_kind {
    ACC_PARAM_UNKNOWN = 0,
    ACC_PARAM_POINTER,       /* a device address (global memory) */
    ACC_PARAM_INT,           /* a signed integer of params[i].size bytes */
    ACC_PARAM_UINT,          /* an unsigned integer */
    ACC_PARAM_FLOAT,         /* a floating-point number (4 or 8 bytes) */
    ACC_PARAM_OTHER,         /* anything else passed by value (a struct) */
    ACC_PARAM_COMPLEX,       /* an argument's kind only (no parameter is
                              * told so): a complex number, two floats */
} acc_param_kind;

#define ACC_MAX_KERNEL_PARAMS 256

typedef struct acc_param {
    size_t size;             /* bytes; 0 when unknown */
    acc_param_kind kind;
} acc_param;

/* What the driver tells of one kernel on its device; -1 (0 for the
 * limits) where it cannot tell. */
typedef struct acc_kernel_info {
    int max_threads_per_block;   /* this kernel's limit on block threads */
    int max_block[3];            /* the device's per-dimension block limit */
    long long max_grid[3];       /* the device's per-dimension grid limit */
    long long shared_bytes;      /* static shared (local) memory */
    long long local_bytes;       /* private memory per thread */
    int registers;               /* registers per thread */
    long long max_shared_bytes;  /* shared_mem a launch may ask for */
    int shared_params;           /* parameters that receive shared_mem
                                  * (OpenCL's __local pointers): a launch
                                  * must then ask for some */
    int nparams;                 /* user parameters; -1 when unknown */
    acc_param params[ACC_MAX_KERNEL_PARAMS]; /* [0, nparams) */
} acc_kernel_info;

/* What a compiler made of source (backend.h: compile).  Every pointer
 * is malloc'd by the backend and freed by the core (free()). */
typedef struct acc_compiled {
    acc_code_format format;  /* of code: one that module_load takes */
    void *code;
    size_t size;
    char *log;               /* the compiler's log (warnings too); NULL
                              * when it wrote none */
    char **lowered;          /* one per name expression asked for, in
                              * order: the name it lowered to (the
                              * symbol get_kernel finds), NULL where the
                              * compiler tells none; NULL when none were
                              * asked for */
} acc_compiled;

/* One launch argument: size bytes at value, passed by value.  A memory
 * argument (device >= 0, or ACC_ARG_HOST) is a uintptr_t address. */
typedef struct acc_kernel_arg {
    const void *value;
    size_t size;
    int device;              /* the memory's device; -1: not memory */
    unsigned flags;          /* ACC_ARG_* */
    acc_param_kind kind;     /* what a by-value scalar holds, where the
                              * caller knows (ACC_PARAM_POINTER: an
                              * address); a floating-point one for a
                              * pointer or integer parameter, or an
                              * integer or address for a floating-point
                              * one, is refused.  ACC_PARAM_UNKNOWN
                              * (bytes: a struct, a converted number):
                              * checked by size only */
} acc_kernel_arg;

enum {
    ACC_ARG_MEMORY = 1u << 0, /* an address of device or page-locked host
                               * memory (a Buffer, a HostBuffer) */
    ACC_ARG_HOST = 1u << 1,   /* page-locked host memory (any device) */
};

/* A launch (backend.h launch): grid[i] blocks of block[i] threads in
 * each of three dimensions (unused ones 1). */
typedef struct acc_launch_config {
    unsigned grid[3];
    unsigned block[3];
    size_t shared_mem;       /* dynamic shared (local) memory, bytes */
    int nargs;
    const acc_kernel_arg *args;
} acc_launch_config;

/* Helpers (no state: the same code in every layer and every backend) --- */

/* The length of text[0, length) without a last UTF-8 character that a cut
 * (snprintf into a full buffer) left incomplete.  Bytes that are not
 * UTF-8 at all (a library path) are kept: the Python layer escapes them. */
static inline size_t
acc_utf8_whole(const char *text, size_t length)
{
    size_t tail = 0;
    unsigned char lead;
    size_t need;

    /* Back over the continuation bytes (10xxxxxx) to the last lead byte;
     * it says how many bytes its character has. */
    while (tail < 3 && tail < length
           && ((unsigned char)text[length - 1 - tail] & 0xC0) == 0x80) {
        tail++;
    }
    if (tail == length) {
        return length;
    }
    lead = (unsigned char)text[length - 1 - tail];
    need = lead >= 0xF8 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3
         : lead >= 0xC0 ? 2 : 0;
    return need > tail + 1 ? length - 1 - tail : length;
}

/* acc_format with a va_list. */
static inline size_t
acc_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, size, fmt, ap);
    size_t length;

    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)n < size) {
        return (size_t)n;
    }
    /* Cut: never leave half a character (a value from the environment or
     * the driver may be any text). */
    length = acc_utf8_whole(buf, size - 1);
    buf[length] = '\0';
    return length;
}

/* Format into a fixed buffer, cutting on a UTF-8 character boundary;
 * returns the length written. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline size_t
acc_format(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    size_t length;

    va_start(ap, fmt);
    length = acc_vformat(buf, size, fmt, ap);
    va_end(ap);
    return length;
}

/* Fill err for a failing driver call: api() failed with the driver's
 * code (and its name, NULL if unknown), reported as status. */
static inline void
acc_error_driver(acc_error *err, const char *backend, const char *api,
                 long long code, const char *code_name, acc_status status)
{
    err->status = status;
    err->backend = backend;
    err->api = api;
    err->code = code;
    err->code_name = code_name;
    acc_format(err->message, sizeof(err->message), "%s() failed: %s (%lld)",
               api, code_name ? code_name : "unknown error", code);
}

#ifdef __cplusplus
}
#endif

#endif /* ACCELERATOR_TYPES_H */
