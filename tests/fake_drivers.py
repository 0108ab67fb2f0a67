"""Python access to the driver test doubles' control functions (ctypes),
and each backend's facts for the behaviour suite.

The doubles (tests/drivers/) export functions that tests use to read call
counters and live-object counts, inject faults and enqueue timed work.
Loading the double with ctypes gives the same library instance that the
extension dlopened (same path), hence the same state.

Everything the behaviour suite must know about a backend (its device type
numbers, what it lacks and why, the driver functions behind an operation)
is a class attribute here, so test bodies never branch on a backend's
name: they ask the double class of the backend under test (DOUBLES).
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
#: what subprocesses put on PYTHONPATH to import the in-place build (the
#: package is at the root); harmless when the package is installed instead
SRC = REPO
DRIVERS = REPO / "tests" / "drivers" / "build"
CUDA_DOUBLE = DRIVERS / "libcuda.so.1"
CUDA_DOUBLE_NOPROC = DRIVERS / "noproc" / "libcuda.so.1"
NVML_DOUBLE = DRIVERS / "libnvidia-ml.so.1"
ZE_DRIVER = DRIVERS / "libze_test_driver.so"
OPENCL_INTERPOSER = DRIVERS / "libopencl_interposer.so"
HIP_DOUBLE = DRIVERS / "libamdhip64.so.5"


#: what the behaviour suite runs on (tests/behaviour/conftest.py)
TEST_BACKEND = os.environ.get("ACCELERATOR_TEST_BACKEND", "cuda")


class Gate:
    """Work on a stream that completes only when the test opens the gate:
    "not done yet" without racing a timed sleep on a loaded machine.

    A context manager that opens the gate on exit, whatever happens, so
    that no test leaves a stream blocked for ever; DriverDouble.open_gates
    opens any left closed (the behaviour suite's teardown calls it).
    """

    def __init__(self, opener: ctypes._CFuncPtr, gate_id: int) -> None:
        self._opener = opener
        self.id = gate_id
        self.is_open = False

    def open(self) -> None:
        """Let the work complete (idempotent)."""
        if not self.is_open:
            self.is_open = True
            assert self._opener(self.id) == 0, f"unknown gate {self.id}"

    def open_soon(self, seconds: float = 0.05) -> None:
        """Open it from another thread a little later: for a test that
        then blocks in a wait which must last until the gate opens."""
        import threading
        timer = threading.Timer(seconds, self.open)
        timer.daemon = True
        timer.start()

    def __enter__(self) -> "Gate":
        return self

    def __exit__(self, *exc: object) -> None:
        self.open()


# Fault sites ---------------------------------------------------------------
#
# How tests/behaviour/test_faults.py reaches a driver function and what a
# failure there must do (its docstring says each in full).
RAISE, FRESH, SILENT, REPORTER = "raise", "fresh", "silent", "reporter"
PROBE, TOLERATED, EXIT, OPTIONAL = "probe", "tolerated", "exit", "optional"
DEFERRED, FALLBACK = "deferred", "fallback"
NULLED = "nulled"
UNREACHED = "unreached"

#: Loader 1.8 returns no usable build log for a failed build through its
#: intercept layer (csrc/backends/level_zero/kernels.c), which it takes
#: when asked or for several drivers: the backend then never reads it.
ZE_FAILED_BUILD_LOG = (
    os.environ.get("ZE_ENABLE_LOADER_INTERCEPT", "").lower()
    not in ("1", "true")
    and os.environ.get("FAKE_ZE_DRIVERS", "1") == "1")


@dataclasses.dataclass(frozen=True)
class Site:
    """One driver function of a backend, and how a fault in it is tested
    (a double class's fault_sites)."""

    api: str
    how: str
    #: what the test does to reach api (a key of fault_actions.ACTIONS)
    action: str = ""
    #: SILENT: objects the driver keeps because it refused to destroy
    refused: tuple[tuple[str, int], ...] = ()
    #: PROBE/OPTIONAL: why; REPORTER: the function that fails first
    note: str = ""
    #: the fault_actions function that makes the state before the fault is
    #: injected, when not PREPARE[action]
    prepare: str = ""
    #: which call of api fails, counted from the start of the action
    nth: int = 1
    #: RAISE: the failed call leaves commands queued on its stream that
    #: use the object's driver events (they run later, in stream order);
    #: the call (api, nth) that then appends the command marking their end
    leaves_work: tuple[str, int] | None = None

    @property
    def id(self) -> str:
        prepared = f", after {self.prepare}" if self.prepare else ""
        nth = f", call {self.nth}" if self.nth != 1 else ""
        return f"{self.api}[{self.action or self.how}{prepared}{nth}]"


class DriverDouble:
    """Backend-neutral view of one driver double's control API.

    Memory kinds every double counts (live()): "alloc" (live device
    allocations), "host_alloc" (live page-locked host allocations),
    "bad_access" (copies, fills and frees that touched memory outside a
    live allocation, so far) and "guard_damage" (allocations whose guard
    bytes were overwritten).
    """

    #: the device type of the backend this double sits under, and how
    #: messages name it ("CUDA out of memory.")
    device_type = ""
    display_type = ""
    #: the format of the test kernels this backend runs (kernel_code.py):
    #: "native" (a double's host shared object), "opencl-c" (source the
    #: driver builds); "" without kernels
    kernel_format = ""
    #: build options that make the driver's build of the test kernels
    #: fail with a build log (None: no such options)
    failing_build_options: str | None = None
    #: the source format the backend compiles (kernel_code.SOURCE_CXX;
    #: "cuda-c++" with NVRTC, "hip-c++" with hiprtc), the variable that
    #: names its compiler library, and the compiler's entry point that
    #: refuses bad source; "" where the backend compiles no source
    source_format = ""
    compiler_env = ""
    compiler_compile = ""
    #: the backend loads SPIR-V but not OpenCL C: OpenCL C source goes
    #: through an offline compiler (clang, then llvm-spirv) first
    opencl_c_through_spirv = False
    #: the driver's error name for a launch of compiled source, which the
    #: doubles load (names, parameters) but cannot run: their devices run
    #: host code only
    no_binary_error = ""
    #: the driver tells each kernel parameter's size (a bare int or float
    #: then passes at that size; a mismatched size is refused)
    kernel_param_sizes = True
    #: the driver tells each parameter's kind too (a pointer, a signed or
    #: unsigned integer): a bare int outside the kind's range, or for a
    #: pointer, is refused.  CUDA's cuFuncGetParamInfo tells sizes only.
    kernel_param_kinds = True
    #: a sized scalar holding a device address (numpy.uint64(buf.ptr),
    #: ctypes.c_void_p(buf.ptr)) passes for a pointer parameter, as CUDA
    #: code passes raw addresses; False where the backend refuses it (the
    #: descriptor's pointer_params_take_memory: OpenCL reads a pointer
    #: argument's bytes as a cl_mem handle)
    kernel_address_args = True
    #: what the backend's descriptor calls the units that
    #: multi_processor_count counts (the report's word for them)
    processor_label = ""
    #: other device types that name the backend's devices where a device
    #: is passed ("cuda" on HIP, as torch built for ROCm calls them)
    device_type_aliases: tuple[str, ...] = ()
    #: torch's c10::DeviceType number (Stream.device_type) and DLPack's
    #: device code for that device type
    torch_device_type = -1
    dlpack_device_type = -1
    #: features of the API the backend lacks -> why; tests that need one
    #: skip with the reason, or check that it is refused ("graphs":
    #: accelerator.Graph)
    lacks: dict[str, str] = {}
    #: (header, X-macro list) pairs naming every driver function the
    #: backend calls, the interprocess ones included (each has its fault
    #: sites, as every function)
    symbol_lists: tuple[tuple[str, str], ...] = ()
    #: those of symbol_lists that list the interprocess functions the
    #: backend's ipc slots call (the tests of the doubles' sharing read
    #: them); empty where the backend does not share
    ipc_symbol_lists: tuple[tuple[str, str], ...] = ()
    #: the driver function behind an operation: "stream_create",
    #: "event_create", "event_record" (the first record's driver call that
    #: makes the record), "query" (what Stream.query() and Event.query()
    #: call), "event_synchronize" (what Event.synchronize() blocks in),
    #: "graph_launch" and "graph_instantiate" (Graph.replay() and
    #: instantiating, where the backend has graphs), "graph_capture_begin",
    #: "graph_capture_end" and "graph_destroy" (the driver call that
    #: capture_begin(), capture_end() and reset() of an instantiated,
    #: idle graph make), "mem_alloc", "mem_free" and "mem_fill"
    #: (Buffer.fill()), "stream_drop_mark" (where the backend marks the
    #: end of a destroyed stream's work to release its driver stream once
    #: that ends: the call that appends the mark)
    functions: dict[str, str] = {}
    #: how the conftest makes the backend use this double
    env_devices = ""
    #: every driver function the backend calls, with how a fault in it is
    #: tested (test_faults checks that the list is complete)
    fault_sites: tuple[Site, ...] = ()

    #: generic kind -> the double's own name for it
    kinds: dict[str, str] = {}
    #: every kind of live object the double counts (its own names)
    live_kinds: tuple[str, ...] = ()
    #: kinds the backend pools and recycles instead of destroying: their
    #: counts settle at the peak in use rather than return to a baseline
    pooled_kinds: tuple[str, ...] = ()
    #: the environment variable that installs faults at load
    fail_env = ""
    #: the product's variable naming the library this backend opens
    library_env = ""
    #: the double's variable for each device's memory in bytes
    total_mem_env = ""
    #: the driver function behind acc.Stream() (with an empty pool)
    stream_create_api = ""
    #: (code, name) of a generic driver failure and of out-of-memory
    unknown_error: tuple[int, str] = (0, "")
    oom_error: tuple[int, str] = (0, "")
    #: the driver function that names an error code, and a code that the
    #: backend's own table lacks with the name the product then reports
    #: (REPORTER fault sites)
    error_name_function = ""
    unnamed_error: tuple[int, str] = (0, "")
    #: 0 names a stream (CUDA's legacy default stream); where it does not,
    #: Stream.from_handle(0) is refused
    null_stream_handle = False
    #: the __dlpack__(stream=) value that names the default stream where
    #: its handle is 0 (CUDA: 1; ROCm: 0), and the values the protocol
    #: refuses besides 0 and those below -1 where 0 is not refused
    #: (ROCm: 1 and 2)
    dlpack_default_stream = 1
    dlpack_refused_streams: tuple[int, ...] = ()
    #: from_dlpack() passes the current stream to the producer's
    #: __dlpack__(stream=), as torch does: its handle, or
    #: dlpack_default_stream for a default stream whose handle is 0 (the
    #: CUDA and ROCm protocols); elsewhere no value names it: None
    dlpack_passes_stream = False
    #: driver calls of one Graph.replay(), besides slot_functions
    replay_calls = 1
    #: (driver function, nth call of it in one replay) that orders the
    #: stream's later work after a replay already launched, where the
    #: launch is not one driver call; ("", 0) where it is
    replay_tail: tuple[str, int] = ("", 0)
    #: driver functions a backend calls to recycle its events on its own
    #: (creating, polling and resetting them), not counted in replay_calls
    slot_functions: tuple[str, ...] = ()
    #: what the errors of graph capture match: "refused" (an operation
    #: the driver refuses on a capturing stream), "invalidated"
    #: (capture_end after one), "wrong_thread" (ending a thread-local or
    #: global capture from another thread), "unjoined" (capture_end while
    #: a stream forked into the capture was not joined back)
    capture_errors: dict[str, str] = {}
    #: the environment under which probing initialises the driver (the
    #: CUDA backend otherwise counts through NVML and defers cuInit)
    eager_probe_env: dict[str, str] = {}
    #: the double's device names and UUIDs end with the driver's index of
    #: the device (so a test sees which device it got); a real runtime's
    #: (PoCL's) do not
    index_in_names = False
    #: the name of the test configuration with eager_probe_env, which
    #: modules that run per configuration run beside the plain one
    #: ("cuda-without-nvml"); "" where probing always initialises
    eager_probe_config = ""
    #: Stream.query() sees work that others queued through the handle
    #: (CUDA; Level Zero only with zeCommandListHostSynchronize, which
    #: Debian's loader 1.8 lacks: query() then answers from the stream's
    #: own last work, and synchronize() still waits for everything)
    query_sees_foreign_work = True
    #: how the probe reports devices counted without initialising the
    #: driver (the start of counted_by), or "" where it always initialises
    counted_without_init = ""
    #: a driver function that probing the backend calls (to hold a probe)
    probe_call = ""
    #: (driver function, Python call): the call's first use of device 1
    #: calls that function while holding the dispatcher's lock
    first_use_under_lock: tuple[str, str] = ("", "")
    #: driver functions that a pageable copy (Buffer.copy_to(bytearray),
    #: copy_from(bytes)) calls to wait for the copy it has queued: a fault
    #: there must not let the call return while the copy still uses the
    #: host memory (none where the driver's copy call itself blocks)
    pageable_copy_waits: tuple[str, ...] = ()
    #: get_device_capability: the dtypes the double's devices support by
    #: default beyond every device's (bool, the ints, float32, complex64),
    #: and an environment under which the driver reports fewer, with the
    #: dtypes that then disappear
    float_dtypes: frozenset[str] = frozenset()
    fewer_float_dtypes: tuple[dict[str, str], frozenset[str]] = ({},
                                                                 frozenset())
    #: the driver function get_device_capability's facts come from
    capability_call = ""

    def __init__(self, path: pathlib.Path, prefix: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.prefix = prefix
        f = self._fn
        f("call_count").argtypes = [ctypes.c_char_p]
        f("call_count").restype = ctypes.c_longlong
        f("reset_counts").restype = None
        f("fail").argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        f("fail").restype = ctypes.c_int
        f("clear_faults").restype = None
        f("live").argtypes = [ctypes.c_char_p]
        f("live").restype = ctypes.c_longlong
        f("delay").argtypes = [ctypes.c_char_p, ctypes.c_double]
        f("delay").restype = ctypes.c_int
        f("reset_detectors").restype = None
        f("hold").argtypes = [ctypes.c_char_p, ctypes.c_double]
        f("hold").restype = ctypes.c_int
        f("held").argtypes = [ctypes.c_char_p]
        f("held").restype = ctypes.c_int
        f("hold_expired").argtypes = [ctypes.c_char_p]
        f("hold_expired").restype = ctypes.c_int
        self._gates: list[Gate] = []

    @classmethod
    def environment(cls, devices: int) -> dict[str, str]:
        """The variables that make the product use this double with that
        many devices, and only this backend."""
        return {"ACCELERATOR_BACKEND": cls.device_type,
                cls.env_devices: str(devices)}

    @classmethod
    def configurations(cls) -> tuple[str, ...]:
        """The names of this backend's test configurations: the plain one
        (its device type) and the one whose probe initialises the driver
        (eager_probe_config), where it has one."""
        return (cls.device_type,) + tuple(filter(None,
                                                 [cls.eager_probe_config]))

    @classmethod
    def configuration(cls, config: str, devices: int) -> dict[str, str]:
        """The environment of one of configurations() with that many
        devices."""
        assert config in cls.configurations(), config
        eager = cls.eager_probe_env if config == cls.eager_probe_config \
            else {}
        return {**cls.environment(devices), **eager}

    @classmethod
    def probe_initialises(cls, config: str) -> bool:
        """Whether answering is_available() initialises the driver in
        that configuration of this backend."""
        return not cls.counted_without_init or config == cls.eager_probe_config

    @classmethod
    def missing(cls) -> str | None:
        """Why this double cannot run here, or None."""
        return None

    @classmethod
    def has(cls, feature: str) -> bool:
        return feature not in cls.lacks

    @classmethod
    def driver_functions(cls) -> list[str]:
        """The functions in the backend's X-macro lists, in list order."""
        return cls.listed_functions(cls.symbol_lists)

    @classmethod
    def ipc_functions(cls) -> list[str]:
        """The functions of ipc_symbol_lists, in list order."""
        return cls.listed_functions(cls.ipc_symbol_lists)

    @staticmethod
    def listed_functions(lists: tuple[tuple[str, str], ...]) -> list[str]:
        """The functions of (header, X-macro list) pairs, in order."""
        names: list[str] = []
        for header, macro in lists:
            text = (REPO / header).read_text()
            match = re.search(rf"^#define {macro}\(X\)((?:.*\\\n)*.*)$",
                              text, re.MULTILINE)
            assert match, f"{macro} not found in {header}"
            names += re.findall(r"\bX\(\s*(\w+)", match.group(1))
        assert names and len(names) == len(set(names)), names
        return names

    def can_enqueue(self, stream: object) -> bool:
        """Whether enqueue_sleep works on that stream right now."""
        return True

    def report_at_exit(self) -> str | None:
        """Ask the double to print its live objects at exit; the line that
        says a context release was refused, or None if it cannot tell."""
        return None

    def _fn(self, name: str) -> ctypes._CFuncPtr:
        return getattr(self.lib, f"fake_{self.prefix}_{name}")

    def calls(self, name: str | None = None) -> int:
        """Driver calls so far of one function (base name), or of all."""
        count = self._fn("call_count")(name.encode() if name else None)
        assert count >= 0, f"the double does not know {name!r}"
        return count

    def reset_counts(self) -> None:
        self._fn("reset_counts")()

    def fail(self, name: str, nth: int, code: int) -> None:
        """Make the nth next call of name fail with code (0: every call)."""
        assert self._fn("fail")(name.encode(), nth, code) == 0, name

    def clear_faults(self) -> None:
        self._fn("clear_faults")()

    def delay(self, name: str, ms: float) -> None:
        """Make every later call of name sleep ms first (0: no delay),
        holding no lock of the double: keeps a thread inside that call."""
        assert self._fn("delay")(name.encode(), ms) == 0, name

    def hold(self, name: str, timeout: float = 30.0) -> Gate:
        """Make the next call of name wait on entry until the returned
        gate opens (or timeout seconds pass, a safety net: the test checks
        with hold_expired() that it opened the gate while the call
        waited)."""
        gate_id = self._fn("hold")(name.encode(), timeout * 1e3)
        assert gate_id > 0, name
        gate = Gate(self._fn("open_gate"), gate_id)
        self._gates.append(gate)
        return gate

    def held(self, name: str) -> int:
        """Calls of name waiting in a hold now."""
        count = self._fn("held")(name.encode())
        assert count >= 0, name
        return count

    def hold_expired(self, name: str) -> int:
        """Holds of name so far that ended by their timeout, not by their
        gate opening."""
        count = self._fn("hold_expired")(name.encode())
        assert count >= 0, name
        return count

    def live(self, kind: str) -> int:
        """Live driver objects: 'stream' or 'event' (or the double's kind)."""
        count = self._fn("live")(self.kinds.get(kind, kind).encode())
        assert count >= 0, f"the double does not count {kind!r}"
        return count

    def enqueue_sleep(self, stream: object, ms: float) -> None:
        """Keep a stream busy for ms milliseconds, like a kernel."""
        raise NotImplementedError

    def gate(self, stream: object) -> Gate:
        """Keep a stream busy until the returned gate is opened.

        Use it where a test asserts that work is not done yet; use
        enqueue_sleep where a delay only makes the test realistic.
        """
        return self._enqueue_gate("enqueue_gate", stream)

    def _enqueue_gate(self, function: str, stream: object) -> Gate:
        """A gate queued on stream by the double's control `function`."""
        gate_id = ctypes.c_int(0)
        rc = self._fn(function)(*self._gate_target(stream),
                                ctypes.byref(gate_id))
        assert rc == 0, f"fake_{self.prefix}_{function} failed: {rc:#x}"
        gate = Gate(self._fn("open_gate"), gate_id.value)
        self._gates.append(gate)
        return gate

    def stall(self, stream: object) -> Gate:
        """A gate that every later command of the stream waits behind
        (not only those that wait for earlier work): what a gate is on a
        stream whose commands run in order, as here."""
        return self.gate(stream)

    def open_gates(self) -> None:
        """Open every gate this object made that is still closed."""
        while self._gates:
            self._gates.pop().open()

    def _gate_target(self, stream: object) -> tuple[object, ...]:
        """The arguments before the gate pointer of enqueue_gate."""
        return (ctypes.c_ulonglong(stream.handle),)  # type: ignore[attr-defined]

    #: the double's detectors: live kinds that count defects found so far
    detectors = ("bad_access", "guard_damage")

    def fired_detectors(self) -> dict[str, int]:
        """The detectors that have counted a defect since their reset."""
        return {kind: n for kind in self.detectors if (n := self.live(kind))}

    def reset_detectors(self) -> None:
        """Zero the detectors' counts (the suite does so after each test,
        so that one defect fails one test)."""
        self._fn("reset_detectors")()

    def live_all(self) -> dict[str, int]:
        """Every live-object count of the double, by its own kind names."""
        return {kind: self.live(kind) for kind in self.live_kinds}

    def mem_range(self, ptr: int) -> tuple[int, int, int]:
        """(kind, base, size) of the driver allocation holding the byte at
        ptr, as the backend's range lookup should find it: kind 1 device
        memory, 2 page-locked host memory, 0 none (base and size 0)."""
        f = self._fn("mem_range")
        f.argtypes = [ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ulonglong),
                      ctypes.POINTER(ctypes.c_ulonglong)]
        f.restype = ctypes.c_int
        base, size = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        kind = f(ptr, ctypes.byref(base), ctypes.byref(size))
        return kind, base.value, size.value


class CudaDouble(DriverDouble):
    """tests/drivers/build/libcuda.so.1."""

    device_type = "cuda"
    display_type = "CUDA"
    index_in_names = True
    processor_label = "multiprocessors"
    torch_device_type = 1
    dlpack_device_type = 2
    dlpack_passes_stream = True
    #: the interprocess functions (cuIpc*; tests/test_ipc_cuda_double.py)
    ipc_symbol_lists = (("csrc/backends/cuda/cuda_api.h",
                         "ACC_CUDA_IPC_FUNCTIONS"),)
    symbol_lists = (("csrc/backends/cuda/cuda_api.h", "ACC_CUDA_FUNCTIONS"),
                    ("csrc/backends/cuda/cuda_api.h", "ACC_CUDA_OPTIONAL_FUNCTIONS"),
                    ("csrc/backends/cuda/nvml_api.h", "ACC_NVML_FUNCTIONS"),
                    *ipc_symbol_lists)
    functions = {"stream_create": "cuStreamCreateWithPriority",
                 "event_create": "cuEventCreate",
                 "event_record": "cuEventRecord", "query": "cuStreamQuery",
                 "event_synchronize": "cuEventSynchronize",
                 "graph_launch": "cuGraphLaunch",
                 "graph_instantiate": "cuGraphInstantiateWithFlags",
                 "graph_capture_begin": "cuStreamBeginCapture",
                 "graph_capture_end": "cuStreamEndCapture",
                 "graph_destroy": "cuGraphExecDestroy",
                 "mem_alloc": "cuMemAlloc", "mem_free": "cuMemFree",
                 "mem_fill": "cuMemsetD8Async"}
    env_devices = "FAKE_CUDA_DEVICES"
    kernel_format = "native"
    kernel_param_kinds = False
    source_format = "cuda-c++"
    compiler_env = "ACCELERATOR_NVRTC_LIBRARY"
    compiler_compile = "nvrtcCompileProgram"
    no_binary_error = "CUDA_ERROR_NO_BINARY_FOR_GPU"
    live_kinds = ("stream", "event", "context", "retain", "alloc",
                  "host_alloc", "bad_access", "guard_damage", "graph",
                  "graph_exec", "module", "kernel_misuse", "ipc_exported",
                  "ipc_opened", "ipc_event_cells")
    #: kernel_misuse: a module unloaded while a launch of it was queued,
    #: or a launch run after its module's unload (double_kernels.h)
    detectors = ("bad_access", "guard_damage", "kernel_misuse")
    fail_env = "FAKE_CUDA_FAIL"
    library_env = "ACCELERATOR_CUDA_LIBRARY"
    total_mem_env = "FAKE_CUDA_TOTAL_MEM"
    stream_create_api = "cuStreamCreateWithPriority"
    unknown_error = (999, "CUDA_ERROR_UNKNOWN")
    oom_error = (2, "CUDA_ERROR_OUT_OF_MEMORY")
    error_name_function = "cuGetErrorName"
    unnamed_error = (12345, "CUDA_ERROR_UNRECOGNIZED")
    capture_errors = {"refused": "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
                      "invalidated": "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                      "wrong_thread": "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
                      "unjoined": "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"}
    null_stream_handle = True
    eager_probe_env = {"ACCELERATOR_NVML_LIBRARY": "none"}
    eager_probe_config = "cuda-without-nvml"
    counted_without_init = "NVML ("
    probe_call = "cuInit"
    first_use_under_lock = ("cuDeviceGetName", "a.get_device_properties(1)")
    # The double's default compute capability is 9.0; 7.0 lacks bfloat16.
    float_dtypes = frozenset({"float16", "bfloat16", "float64",
                              "complex128"})
    fewer_float_dtypes = ({"FAKE_CUDA_CC": "7.0"}, frozenset({"bfloat16"}))
    capability_call = "cuDeviceGetAttribute"

    fault_sites = (
        Site("cuInit", PROBE),
        Site("cuDriverGetVersion", TOLERATED,
             note="only the version text is lost"),
        Site("cuGetErrorName", REPORTER, "stream.query()", note="cuStreamQuery"),
        Site("cuGetErrorName", PROBE, note="with cuInit failing (unknown code)"),
        Site("cuGetErrorString", REPORTER, "stream.query()",
             note="cuStreamQuery"),
        Site("cuGetErrorString", PROBE, note="with cuInit failing"),
        Site("cuDeviceGetCount", PROBE),
        Site("cuDeviceGet", PROBE),
        Site("cuInit", DEFERRED),
        Site("cuDeviceGetCount", DEFERRED),
        Site("cuDeviceGet", DEFERRED),
        Site("nvmlInit_v2", FALLBACK),
        Site("nvmlDeviceGetCount_v2", FALLBACK),
        Site("nvmlDeviceGetHandleByIndex_v2", FALLBACK,
             note="CUDA_VISIBLE_DEVICES=GPU-..."),
        Site("nvmlDeviceGetUUID", FALLBACK, note="CUDA_VISIBLE_DEVICES=GPU-..."),
        Site("nvmlShutdown", FALLBACK),
        Site("nvmlErrorString", FALLBACK, note="with nvmlInit_v2 failing"),
        Site("cuDeviceGetName", FRESH, "get_device_properties(0)"),
        Site("cuDeviceGetUuid", FRESH, "get_device_properties(0)"),
        Site("cuDeviceTotalMem", FRESH, "get_device_properties(0)"),
        Site("cuDeviceGetAttribute", FRESH, "get_device_properties(0)"),
        Site("cuDevicePrimaryCtxRetain", FRESH, "Stream()", prepare="nothing"),
        Site("cuDevicePrimaryCtxRetain", FRESH,
             "set_device_index(1) in a new thread"),
        Site("cuDevicePrimaryCtxRelease", EXIT),
        # Asked only while this process has not retained the context (and
        # has initialised the driver: device 0 is in use).
        Site("cuDevicePrimaryCtxGetState", FRESH, "synchronize(1)",
             prepare="on_device_0"),
        Site("cuCtxSetCurrent", RAISE, "set_device_index(1) in a new thread"),
        Site("cuCtxSetCurrent", RAISE, "with Stream(1) in a new thread"),
        Site("cuCtxSetCurrent", RAISE, "set_stream(Stream(1)) in a new thread"),
        Site("cuCtxSetCurrent", RAISE, "device_index(1) in a new thread"),
        Site("cuCtxSetCurrent", RAISE, "exit from device 1 in a new thread",
             nth=3),
        Site("cuCtxGetCurrent", RAISE, "Stream()"),
        Site("cuCtxGetCurrent", RAISE, "default stream query()"),
        Site("cuCtxPushCurrent", RAISE, "Stream(1) from device 0"),
        # A failed pop leaves the pushed context on the thread's stack, which
        # would follow the rest of this process: a fresh one.
        Site("cuCtxPopCurrent", FRESH, "Stream(1) from device 0"),
        Site("cuCtxPopCurrent", FRESH, "Stream(1) from device 0",
             prepare="device_1_ready"),
        Site("cuCtxPopCurrent", FRESH, "first event.record() on device 1",
             prepare="device_1_ready"),
        Site("cuCtxPopCurrent", FRESH, "get_memory_info(1) from device 0"),
        Site("cuCtxSynchronize", RAISE, "synchronize(0)"),
        Site("cuCtxGetStreamPriorityRange", FRESH, "Stream()"),
        Site("cuStreamCreateWithPriority", RAISE, "Stream()"),
        Site("cuStreamQuery", RAISE, "stream.query()"),
        Site("cuStreamQuery", RAISE, "default stream query()"),
        Site("cuStreamQuery", RAISE, "wrapped stream.query()"),
        Site("cuStreamSynchronize", RAISE, "stream.synchronize()"),
        Site("cuStreamSynchronize", RAISE, "default stream synchronize()"),
        Site("cuStreamSynchronize", RAISE, "wrapped stream.synchronize()"),
        Site("cuStreamWaitEvent", RAISE, "stream.wait_event()"),
        Site("cuStreamWaitEvent", RAISE, "event.wait(stream)"),
        Site("cuStreamWaitEvent", RAISE, "stream.wait_stream()"),
        Site("cuStreamDestroy", SILENT, "drop the objects",
             refused=(("stream", 1),)),
        Site("cuEventCreate", RAISE, "first event.record()"),
        Site("cuEventCreate", RAISE, "stream.record_event()"),
        Site("cuEventCreate", RAISE, "stream.wait_stream()"),
        Site("cuEventRecord", RAISE, "first event.record()"),
        Site("cuEventRecord", RAISE, "event.record() again"),
        Site("cuEventRecord", RAISE, "stream.wait_stream()"),
        Site("cuEventQuery", RAISE, "event.query()"),
        Site("cuEventSynchronize", RAISE, "event.synchronize()"),
        Site("cuEventElapsedTime", RAISE, "elapsed_time()"),
        Site("cuEventDestroy", SILENT, "drop the objects",
             refused=(("event", 1),)),
        Site("cuMemGetInfo", RAISE, "get_memory_info(0)"),
        # Every call fails (nth=0): an out-of-memory error is retried once
        # after releasing the cache (test_allocator.py tests that retry).
        Site("cuMemAlloc", RAISE, "Buffer()", nth=0),
        Site("cuMemAlloc", RAISE, "Buffer(1) from device 0", nth=0),
        # The allocator keeps memory whose free the driver refused (still
        # reserved, in the statistics too) and frees it at the next release.
        Site("cuMemFree", SILENT, "drop a buffer"),
        Site("cuMemHostAlloc", RAISE, "HostBuffer()"),
        Site("cuMemFreeHost", SILENT, "drop a host buffer",
             refused=(("host_alloc", 1),)),
        Site("cuMemcpyHtoDAsync", RAISE, "copy_from(bytes)"),
        Site("cuMemcpyHtoDAsync", RAISE, "copy_from(HostBuffer)"),
        Site("cuMemcpyDtoHAsync", RAISE, "copy_to(bytearray)"),
        Site("cuMemcpyDtoHAsync", RAISE, "copy_to(HostBuffer)"),
        Site("cuMemcpyDtoDAsync", RAISE, "copy_from(Buffer)"),
        Site("cuMemcpyPeerAsync", RAISE, "copy_from(Buffer of device 1)"),
        Site("cuMemsetD8Async", RAISE, "fill()"),
        Site("cuStreamIsCapturing", RAISE, "Graph.capture_begin()"),
        Site("cuStreamBeginCapture", RAISE, "Graph.capture_begin()"),
        Site("cuStreamEndCapture", RAISE, "Graph.capture_end()"),
        Site("cuGraphInstantiateWithFlags", RAISE, "Graph.instantiate()"),
        Site("cuGraphLaunch", RAISE, "Graph.replay()"),
        Site("cuGraphExecDestroy", SILENT, "drop a graph",
             refused=(("graph_exec", 1),)),
        Site("cuGraphDestroy", SILENT, "drop a graph", refused=(("graph", 1),)),
        Site("cuPointerGetAttribute", RAISE, "from_dlpack(capsule)"),
        Site("cuMemGetAddressRange", RAISE, "from_dlpack(capsule)"),
        Site("cuModuleLoadDataEx", RAISE, "Module()"),
        Site("cuModuleGetFunction", RAISE, "get_kernel()"),
        Site("cuFuncGetAttribute", RAISE, "get_kernel()"),
        Site("cuDeviceGetAttribute", RAISE, "get_kernel()",
             note="the device's launch limits"),
        Site("cuFuncGetParamInfo", RAISE, "get_kernel()"),
        Site("cuLaunchKernel", RAISE, "launch()"),
        Site("cuModuleUnload", SILENT, "drop a module",
             refused=(("module", 1),)),
        # Only for the names in get_kernel()'s KeyError.
        Site("cuModuleGetFunctionCount", SILENT, "get_kernel(unknown name)"),
        Site("cuModuleEnumerateFunctions", SILENT,
             "get_kernel(unknown name)"),
        Site("cuFuncGetName", SILENT, "get_kernel(unknown name)"),
        # Sharing with other processes (the memory and events opened are
        # another process's: tests/behaviour/ipc_peer.py makes them).  An
        # interprocess event is made at its first record, with the flags.
        Site("cuIpcGetMemHandle", RAISE, "Buffer.ipc_handle()"),
        Site("cuEventCreate", RAISE, "first interprocess event.record()"),
        Site("cuEventRecord", RAISE, "first interprocess event.record()"),
        Site("cuIpcGetEventHandle", RAISE, "Event.ipc_handle()"),
        Site("cuIpcOpenMemHandle", RAISE,
             "Buffer.from_ipc_handle() of another process"),
        Site("cuIpcOpenMemHandle", RAISE,
             "Buffer.from_driver_ipc_handle() of another process"),
        # The driver checks the range opened by a driver's handle alone.
        Site("cuMemGetAddressRange", RAISE,
             "Buffer.from_driver_ipc_handle() of another process"),
        Site("cuIpcOpenEventHandle", RAISE,
             "Event.from_ipc_handle() of another process"),
        # A refused close leaves the mapping (or event) to the driver.
        Site("cuIpcCloseMemHandle", SILENT, "drop a buffer of another process",
             refused=(("ipc_opened", 1),)),
        Site("cuEventDestroy", SILENT, "drop an event of another process",
             refused=(("event", 1), ("ipc_event_cells", 1))),
    )

    def __init__(self, path: pathlib.Path = CUDA_DOUBLE) -> None:
        super().__init__(path, "cuda")
        self.lib.fake_cuda_enqueue_sleep.argtypes = [
            ctypes.c_int, ctypes.c_ulonglong, ctypes.c_double]
        self.lib.fake_cuda_enqueue_sleep.restype = ctypes.c_int
        for name in ("event_sync_blocked", "event_sync_spun"):
            self._fn(name).restype = ctypes.c_longlong
        self.lib.fake_cuda_current_device.restype = ctypes.c_int
        self.lib.fake_cuda_foreign_work.argtypes = [ctypes.c_int,
                                                    ctypes.c_double]
        self.lib.fake_cuda_foreign_work.restype = ctypes.c_int
        self.lib.fake_cuda_foreign_done.argtypes = [ctypes.c_int]
        self.lib.fake_cuda_foreign_done.restype = ctypes.c_int

    @classmethod
    def environment(cls, devices: int) -> dict[str, str]:
        return {**super().environment(devices),
                "ACCELERATOR_CUDA_LIBRARY": str(CUDA_DOUBLE)}

    @classmethod
    def missing(cls) -> str | None:
        if CUDA_DOUBLE.exists():
            return None
        return f"{CUDA_DOUBLE} is missing: run make -C tests/drivers"

    def can_enqueue(self, stream: object) -> bool:
        # The legacy default stream (handle 0) is reached through its
        # device's primary context, which must be retained.
        return stream.handle != 0  # type: ignore[attr-defined]

    def report_at_exit(self) -> str | None:
        self.lib.fake_cuda_report_at_exit()
        return "fake_cuda at exit: retain=1 "

    def enqueue_sleep(self, stream: object, ms: float) -> None:
        rc = self.lib.fake_cuda_enqueue_sleep(
            stream.device_index, stream.handle, ms)  # type: ignore[attr-defined]
        assert rc == 0, f"fake_cuda_enqueue_sleep failed: {rc}"

    def _gate_target(self, stream: object) -> tuple[object, ...]:
        return (ctypes.c_int(stream.device_index),  # type: ignore[attr-defined]
                ctypes.c_ulonglong(stream.handle))  # type: ignore[attr-defined]

    def blocking_syncs(self) -> int:
        return self.lib.fake_cuda_event_sync_blocked()

    def current_device(self) -> int:
        """The device of the calling thread's current driver context."""
        return self.lib.fake_cuda_current_device()

    def foreign_work(self, device: int, ms: float) -> None:
        """As another library would: retain device's primary context for
        itself and queue ms of work on its legacy default stream."""
        rc = self.lib.fake_cuda_foreign_work(device, ms)
        assert rc == 0, f"fake_cuda_foreign_work failed: {rc}"

    def foreign_done(self, device: int) -> bool:
        """Whether the work foreign_work queued on device has run."""
        done = self.lib.fake_cuda_foreign_done(device)
        assert done >= 0, device
        return bool(done)


class NvmlDouble(DriverDouble):
    """tests/drivers/build/libnvidia-ml.so.1: the CUDA double's machine as
    NVML sees it (live kind "init": nvmlInit calls not shut down)."""

    live_kinds = ("init",)
    fail_env = "FAKE_NVML_FAIL"
    unknown_error = (999, "NVML_ERROR_UNKNOWN")

    def __init__(self, path: pathlib.Path = NVML_DOUBLE) -> None:
        super().__init__(path, "nvml")


class ZeDouble(DriverDouble):
    """tests/drivers/build/libze_test_driver.so, under the real loader."""

    query_sees_foreign_work = False
    pageable_copy_waits = ("zeEventHostSynchronize",)

    device_type = "xpu"
    display_type = "XPU"
    index_in_names = True
    processor_label = "execution units"
    torch_device_type = 12
    dlpack_device_type = 14
    lacks = {
        "ipc_rerecord_across_processes": (
            "OPEN DEFECT (issue 32): a Level Zero interprocess event "
            "recorded again every round while the other process waits on "
            "it hung once in about four runs of the 1,000-round ping-pong "
            "under the sanitizers and the validation layer (the in-order "
            "reset and re-signal of sharing.c against the other process's "
            "level-triggered wait); not yet understood"),
        "cuda_stream_protocol": "Level Zero streams are not CUDA streams",
        "blocking_sync": "Level Zero has no blocking-synchronization flag",
        "foreign_capture": "Level Zero has no stream capture: a capture "
                           "records this module's work into a regular "
                           "command list, while work others append to the "
                           "stream's immediate list runs at once",
    }
    #: the interprocess functions (ze_api.h's ACC_ZE_IPC_FUNCTIONS: the
    #: backend's ipc slots call them, and its event_destroy closes the
    #: pool an ipc_event_open opened; tests/test_ipc_ze_driver.py)
    ipc_symbol_lists = (("csrc/backends/level_zero/ze_api.h",
                         "ACC_ZE_IPC_FUNCTIONS"),)
    symbol_lists = (("csrc/backends/level_zero/ze_api.h", "ACC_ZE_FUNCTIONS"),
                    ("csrc/backends/level_zero/ze_api.h", "ACC_ZE_OPTIONAL_FUNCTIONS"),
                    *ipc_symbol_lists)
    functions = {"stream_create": "zeCommandListCreateImmediate",
                 "event_create": "zeEventCreate",
                 "event_record": "zeCommandListAppendBarrier",
                 "query": "zeEventQueryStatus",
                 "event_synchronize": "zeEventHostSynchronize",
                 "graph_launch": "zeCommandQueueExecuteCommandLists",
                 "graph_instantiate": "zeCommandQueueCreate",
                 "graph_capture_begin": "zeCommandListCreate",
                 "graph_capture_end": "zeCommandListClose",
                 "graph_destroy": "zeCommandQueueDestroy",
                 "mem_alloc": "zeMemAllocDevice", "mem_free": "zeMemFree",
                 "mem_fill": "zeCommandListAppendMemoryFill",
                 "stream_drop_mark": "zeCommandListAppendBarrier"}
    #: after the previous replay: reset the list's end event, signal its
    #: start event, execute, and wait for its end (barriers on the stream)
    replay_calls = 5
    #: after zeCommandQueueExecuteCommandLists: the stream's barrier that
    #: waits for the list's end (the third barrier of a replay)
    replay_tail = ("zeCommandListAppendBarrier", 3)
    slot_functions = ("zeEventPoolCreate", "zeEventCreate",
                      "zeEventQueryStatus", "zeEventHostReset")
    capture_errors = {
        "refused": "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE.*captures a graph",
        "invalidated": "ZE_RESULT_ERROR_INVALID_ARGUMENT.*invalidated",
        "wrong_thread": "ZE_RESULT_ERROR_INVALID_ARGUMENT.*another thread",
        "unjoined": "ZE_RESULT_ERROR_INVALID_ARGUMENT.*not joined back"}
    env_devices = "FAKE_ZE_DEVICES"
    kinds = {"stream": "list"}
    live_kinds = ("list", "event", "pool", "context", "queue", "alloc",
                  "host_alloc", "bad_access", "guard_damage", "module",
                  "kernel", "build_log", "kernel_misuse", "ipc_exported",
                  "ipc_opened", "ipc_event_cells")
    pooled_kinds = ("event", "pool")
    kernel_format = "native"
    opencl_c_through_spirv = True
    # The double knows Intel's documented build flags only.
    failing_build_options = "-no-such-option"
    # Spec 1.4 tells a kernel's argument count, not the sizes: the core
    # reads native kernels' parameters from their table (native_table.c).
    fail_env = "FAKE_ZE_FAIL"
    library_env = "ACCELERATOR_ZE_LIBRARY"
    total_mem_env = "FAKE_ZE_TOTAL_MEM"
    stream_create_api = "zeCommandListCreateImmediate"
    unknown_error = (0x7FFFFFFE, "ZE_RESULT_ERROR_UNKNOWN")
    oom_error = (0x70000003, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY")
    probe_call = "zeDriverGet"
    first_use_under_lock = ("zeCommandListCreateImmediate",
                            "a.current_stream(1)")
    # Module flags FP16 | FP64; core Level Zero has no bfloat16 flag.
    float_dtypes = frozenset({"float16", "float64", "complex128"})
    fewer_float_dtypes = ({"FAKE_ZE_MODULE_FLAGS": "1"},
                          frozenset({"float64", "complex128"}))
    capability_call = "zeDeviceGetModuleProperties"

    fault_sites = (
        Site("zeInit", PROBE),
        Site("zeDriverGet", PROBE),
        Site("zeDriverGetApiVersion", PROBE),
        Site("zeDriverGetProperties", PROBE),
        Site("zeDriverGet", PROBE, nth=2),
        Site("zeDeviceGet", PROBE),
        Site("zeDeviceGet", PROBE, nth=2),
        Site("zeDeviceGetProperties", PROBE),
        Site("zeDeviceGetMemoryProperties", PROBE),
        Site("zeDeviceGetMemoryProperties", PROBE, nth=2),
        Site("zeDeviceGetCommandQueueGroupProperties", TOLERATED,
             note="the first queue group is used"),
        Site("zeContextCreate", FRESH, "Stream()", prepare="nothing"),
        Site("zeContextCreate", FRESH, "default stream query()"),
        Site("zeContextDestroy", EXIT),
        Site("zeCommandListCreateImmediate", RAISE, "Stream()"),
        Site("zeCommandListCreateImmediate", FRESH, "default stream query()"),
        Site("zeCommandListDestroy", SILENT, "drop the objects"),
        Site("zeCommandListAppendBarrier", RAISE, "first event.record()"),
        Site("zeCommandListAppendBarrier", RAISE, "event.record() again"),
        Site("zeCommandListAppendBarrier", RAISE, "stream.synchronize()"),
        Site("zeCommandListAppendBarrier", RAISE, "synchronize(0)"),
        Site("zeCommandListAppendBarrier", RAISE, "stream.wait_stream()"),
        Site("zeCommandListAppendBarrier", RAISE, "wrapped stream.synchronize()"),
        Site("zeCommandListAppendBarrier", SILENT, "drop the objects"),
        Site("zeCommandListAppendBarrier", RAISE, "stream.wait_event()"),
        Site("zeCommandListAppendBarrier", RAISE, "event.wait(stream)"),
        Site("zeCommandListAppendBarrier", RAISE,
             "stream.wait_event() across drivers"),
        Site("zeEventPoolCreate", FRESH, "first event.record()"),
        Site("zeEventPoolDestroy", EXIT),
        Site("zeEventCreate", FRESH, "first event.record()"),
        Site("zeEventDestroy", EXIT),
        Site("zeEventHostSynchronize", RAISE, "event.synchronize()"),
        Site("zeEventHostSynchronize", RAISE, "stream.synchronize()"),
        Site("zeEventHostSynchronize", RAISE, "synchronize(0)"),
        Site("zeEventQueryStatus", RAISE, "event.query()"),
        # query() answers from the stream's last barrier, without waiting.
        Site("zeEventQueryStatus", RAISE, "stream.query()",
             prepare="with_recorded_event"),
        Site("zeEventQueryStatus", RAISE, "wrapped stream.query()",
             prepare="with_recorded_event"),
        Site("zeEventHostReset", SILENT, "event.record() after completion"),
        # Signalled by the bridge thread: retried, never reported.
        Site("zeEventHostSignal", SILENT, "stream.wait_event() across drivers"),
        Site("zeEventQueryKernelTimestamp", RAISE, "elapsed_time()"),
        # As on CUDA: every call fails (nth=0), since an out-of-memory error
        # is retried once after releasing the cache.
        Site("zeMemAllocDevice", RAISE, "Buffer()", nth=0),
        Site("zeMemAllocDevice", RAISE, "Buffer(1) from device 0", nth=0),
        Site("zeMemAllocHost", RAISE, "HostBuffer()"),
        # The allocator keeps a segment whose free the driver refused and
        # frees it at the next release, as on CUDA.
        Site("zeMemFree", SILENT, "drop a buffer"),
        # Device and host memory share zeMemFree: the host buffer is dropped
        # where no device segment is cached, so the fault meets its free.
        Site("zeMemFree", SILENT, "drop a lone host buffer",
             refused=(("host_alloc", 1),)),
        Site("zeCommandListAppendMemoryCopy", RAISE, "copy_from(bytes)"),
        Site("zeCommandListAppendMemoryCopy", RAISE, "copy_from(HostBuffer)"),
        Site("zeCommandListAppendMemoryCopy", RAISE, "copy_to(bytearray)"),
        Site("zeCommandListAppendMemoryCopy", RAISE, "copy_to(HostBuffer)"),
        Site("zeCommandListAppendMemoryCopy", RAISE, "copy_from(Buffer)"),
        Site("zeCommandListAppendMemoryCopy", RAISE,
             "copy_from(Buffer of device 1)"),
        Site("zeCommandListAppendMemoryFill", RAISE, "fill()"),
        Site("zeMemGetAllocProperties", RAISE, "from_dlpack(capsule)"),
        Site("zeMemGetAddressRange", RAISE, "from_dlpack(capsule)"),
        # The barrier that orders a copy or fill on a list that is not in
        # order, and the wait that makes a pageable copy synchronous.
        Site("zeCommandListAppendBarrier", RAISE, "fill()"),
        Site("zeCommandListAppendBarrier", RAISE, "copy_from(bytes)"),
        Site("zeEventHostSynchronize", RAISE, "copy_to(bytearray)"),
        # Sysman (ZES_ENABLE_SYSMAN=1 in this suite): the modules are found
        # once per device, the PCI address read once with the properties.
        Site("zesDeviceEnumMemoryModules", FRESH, "get_memory_info(0)"),
        Site("zesDeviceEnumMemoryModules", FRESH, "get_memory_info(0)", nth=2),
        Site("zesMemoryGetProperties", FRESH, "get_memory_info(0)"),
        Site("zesMemoryGetState", RAISE, "get_memory_info(0)"),
        Site("zesDevicePciGetProperties", FRESH, "get_device_properties(0)"),
        Site("zeDeviceGetModuleProperties", FRESH, "get_device_properties(0)"),
        Site("zeDeviceGetModuleProperties", FRESH, "get_device_capability(0)"),
        # Graphs: the capture's regular list and its start event (begin),
        # its end event and closing (end), the queue (instantiate), and a
        # replay's barriers, event reset and execution on the queue.
        Site("zeCommandListCreate", RAISE, "Graph.capture_begin()"),
        Site("zeCommandListAppendBarrier", RAISE, "Graph.capture_begin()"),
        Site("zeCommandListAppendEventReset", RAISE, "Graph.capture_begin()"),
        Site("zeCommandListAppendBarrier", RAISE, "Graph.capture_end()"),
        Site("zeCommandListClose", RAISE, "Graph.capture_end()"),
        Site("zeCommandQueueCreate", RAISE, "Graph.instantiate()"),
        Site("zeCommandListAppendBarrier", RAISE, "Graph.replay()"),
        Site("zeCommandListAppendBarrier", RAISE, "Graph.replay()", nth=2,
             leaves_work=("zeCommandListAppendBarrier", 3)),
        Site("zeCommandListAppendBarrier", RAISE, "Graph.replay()", nth=3),
        Site("zeCommandListAppendEventReset", RAISE, "Graph.replay()"),
        Site("zeCommandQueueExecuteCommandLists", RAISE, "Graph.replay()",
             leaves_work=("zeCommandListAppendBarrier", 3)),
        # A graph dropped is destroyed at once when idle; a refused destroy is
        # tried again at the next synchronize.
        Site("zeCommandQueueDestroy", SILENT, "drop a graph"),
        Site("zeCommandListDestroy", SILENT, "drop a graph"),
        # Kernels: the module and its build log (read only when the build
        # failed: without it the BuildError carries no log), the device's
        # limits and the kernel's properties, a launch's group size,
        # arguments, ordering barrier and append.  A refused destroy
        # leaves the object to the driver (a kernel keeps its module).
        Site("zeModuleCreate", RAISE, "Module()"),
        Site("zeModuleBuildLogDestroy", SILENT, "Module()",
             refused=(("build_log", 1),)),
        Site("zeModuleBuildLogGetString",
             SILENT if ZE_FAILED_BUILD_LOG else UNREACHED,
             "Module(broken code)",
             note="" if ZE_FAILED_BUILD_LOG else
             "loader 1.8 cannot return a failed build's log through its "
             "intercept layer: reading it would crash"),
        Site("zeModuleGetKernelNames", SILENT, "get_kernel(unknown name)"),
        Site("zeDeviceGetComputeProperties", RAISE, "get_kernel()"),
        Site("zeKernelCreate", RAISE, "get_kernel()"),
        Site("zeKernelGetProperties", RAISE, "get_kernel()"),
        Site("zeKernelSetGroupSize", RAISE, "launch()"),
        Site("zeKernelSetArgumentValue", RAISE, "launch()"),
        Site("zeCommandListAppendBarrier", RAISE, "launch()"),
        Site("zeCommandListAppendLaunchKernel", RAISE, "launch()"),
        Site("zeKernelDestroy", SILENT, "drop a module",
             refused=(("kernel", 1), ("module", 1))),
        Site("zeModuleDestroy", SILENT, "drop a module",
             refused=(("module", 1),)),
        Site("zeCommandListHostSynchronize", OPTIONAL,
             note="spec 1.6: Debian's loader 1.8 (spec 1.4) does not export it"),
        Site("zeDriverGetLastErrorDescription", OPTIONAL,
             note="spec 1.6: Debian's loader 1.8 (spec 1.4) does not export it"),
        # Sharing with other processes (tests/behaviour/ipc_peer.py makes
        # what is opened).  An interprocess event is the only event of a
        # pool of its own, made at its first record; an opened one is
        # event 0 of the pool opened.
        Site("zeMemGetIpcHandle", RAISE, "Buffer.ipc_handle()"),
        Site("zeEventPoolCreate", RAISE, "first interprocess event.record()"),
        Site("zeEventCreate", RAISE, "first interprocess event.record()"),
        Site("zeCommandListAppendBarrier", RAISE,
             "first interprocess event.record()"),
        Site("zeEventPoolGetIpcHandle", RAISE, "Event.ipc_handle()"),
        # Recorded again while its last record is pending, the event is
        # reset in order: a barrier waiting for its last signal, the
        # reset, the signal, and the fence that tells this process when
        # the reset has run.
        Site("zeCommandListAppendBarrier", RAISE,
             "interprocess event.record() again while pending"),
        Site("zeCommandListAppendBarrier", RAISE,
             "interprocess event.record() again while pending", nth=2),
        Site("zeCommandListAppendBarrier", RAISE,
             "interprocess event.record() again while pending", nth=3),
        Site("zeCommandListAppendEventReset", RAISE,
             "interprocess event.record() again while pending"),
        Site("zeMemOpenIpcHandle", RAISE,
             "Buffer.from_ipc_handle() of another process"),
        Site("zeEventPoolOpenIpcHandle", RAISE,
             "Event.from_ipc_handle() of another process"),
        Site("zeEventCreate", RAISE,
             "Event.from_ipc_handle() of another process"),
        # A refused close leaves the mapping (or pool) to the driver.
        Site("zeMemCloseIpcHandle", SILENT,
             "drop a buffer of another process",
             refused=(("ipc_opened", 1),)),
        Site("zeEventDestroy", SILENT, "drop an event of another process"),
        Site("zeEventPoolCloseIpcHandle", SILENT,
             "drop an event of another process",
             refused=(("pool", 1), ("ipc_event_cells", 1))),
    )

    def __init__(self, path: pathlib.Path = ZE_DRIVER) -> None:
        super().__init__(path, "ze")
        self.lib.fake_ze_enqueue_sleep.argtypes = [
            ctypes.c_ulonglong, ctypes.c_double]
        self.lib.fake_ze_enqueue_sleep.restype = ctypes.c_int
        self.lib.fake_ze_drivers.restype = ctypes.c_int

    def drivers(self) -> int:
        """Drivers the library presents (FAKE_ZE_DRIVERS); events cannot
        cross them."""
        return self.lib.fake_ze_drivers()

    @classmethod
    def environment(cls, devices: int) -> dict[str, str]:
        # FAKE_ZE_DRIVERS=2 (from the caller's environment) splits the
        # devices between two drivers, so that waits cross contexts
        # (tests/run.sh does so in one of its runs).
        drivers = int(os.environ.get("FAKE_ZE_DRIVERS", "1"))
        if drivers < 1 or devices % drivers:
            raise ValueError(f"FAKE_ZE_DRIVERS={drivers} does not divide "
                             f"{devices} devices")
        return {**super().environment(devices // drivers),
                "FAKE_ZE_DRIVERS": str(drivers),
                "ZE_ENABLE_ALT_DRIVERS": str(ZE_DRIVER),
                # As Intel's driver: Sysman (free memory, PCI address)
                # answers only then.
                "ZES_ENABLE_SYSMAN": "1"}

    @classmethod
    def missing(cls) -> str | None:
        if ZE_DRIVER.exists():
            return None
        return (f"{ZE_DRIVER} is missing: install libze-dev and run "
                "make -C tests/drivers")

    def enqueue_sleep(self, stream: object, ms: float) -> None:
        # The handle is the driver's, or the loader's wrapper of it in
        # intercept mode; the driver accepts both.
        rc = self.lib.fake_ze_enqueue_sleep(
            stream.handle, ms)  # type: ignore[attr-defined]
        assert rc == 0, f"fake_ze_enqueue_sleep failed: {rc:#x}"

    def stall(self, stream: object) -> Gate:
        # Lists that are not in order let a gate's later commands run
        # unless they wait for earlier work: a barrier keeps them back.
        return self._enqueue_gate("enqueue_stall", stream)


class HipDouble(DriverDouble):
    """tests/drivers/build/libamdhip64.so.5: the HIP runtime double."""

    device_type = "hip"
    display_type = "HIP"
    index_in_names = True
    processor_label = "compute units"
    dlpack_default_stream = 0
    dlpack_refused_streams = (1, 2)
    device_type_aliases = ("cuda",)
    torch_device_type = 6
    dlpack_device_type = 10
    dlpack_passes_stream = True
    #: code objects: the double runs host shared objects (the native
    #: format) handed over as an hsaco is
    kernel_format = "native"
    source_format = "hip-c++"
    compiler_env = "ACCELERATOR_HIPRTC_LIBRARY"
    compiler_compile = "hiprtcCompileProgram"
    no_binary_error = "hipErrorNoBinaryForGpu"
    #: ROCm 5.2 has no call that tells a kernel's parameters: the core
    #: reads native kernels' parameters from their table (native_table.c),
    #: an hsaco's from its metadata (hsaco_table.c)
    lacks = {
        "cuda_stream_protocol": "HIP streams are not CUDA streams",
    }
    #: the interprocess functions the backend's ipc slots call
    #: (tests/test_ipc_hip_double.py)
    ipc_symbol_lists = (("csrc/backends/hip/hip_api.h",
                         "ACC_HIP_IPC_FUNCTIONS"),)
    symbol_lists = (("csrc/backends/hip/hip_api.h", "ACC_HIP_FUNCTIONS"),
                    *ipc_symbol_lists)
    functions = {"stream_create": "hipStreamCreateWithPriority",
                 "event_create": "hipEventCreateWithFlags",
                 "event_record": "hipEventRecord", "query": "hipStreamQuery",
                 "event_synchronize": "hipEventSynchronize",
                 "graph_launch": "hipGraphLaunch",
                 "graph_instantiate": "hipGraphInstantiate",
                 "graph_capture_begin": "hipStreamBeginCapture",
                 "graph_capture_end": "hipStreamEndCapture",
                 "graph_destroy": "hipGraphExecDestroy",
                 "mem_alloc": "hipMalloc", "mem_free": "hipFree",
                 "mem_fill": "hipMemsetD8Async"}
    env_devices = "FAKE_HIP_DEVICES"
    live_kinds = ("stream", "event", "alloc", "host_alloc", "bad_access",
                  "guard_damage", "graph", "graph_exec", "module",
                  "kernel_misuse", "ipc_exported", "ipc_opened",
                  "ipc_event_cells")
    #: kernel_misuse: a module unloaded while a launch of it was queued
    detectors = ("bad_access", "guard_damage", "kernel_misuse")
    capture_errors = {"refused": "hipErrorStreamCaptureUnsupported",
                      "invalidated": "hipErrorStreamCaptureInvalidated",
                      "wrong_thread": "hipErrorStreamCaptureWrongThread",
                      "unjoined": "hipErrorStreamCaptureUnjoined"}
    fail_env = "FAKE_HIP_FAIL"
    library_env = "ACCELERATOR_HIP_LIBRARY"
    total_mem_env = "FAKE_HIP_TOTAL_MEM"
    stream_create_api = "hipStreamCreateWithPriority"
    unknown_error = (999, "hipErrorUnknown")
    oom_error = (2, "hipErrorOutOfMemory")
    # The double is a gfx9 device; gfx8 has no bfloat16.
    float_dtypes = frozenset({"float16", "bfloat16", "float64",
                              "complex128"})
    fewer_float_dtypes = ({"FAKE_HIP_GFX": "8.0"}, frozenset({"bfloat16"}))
    capability_call = "hipDeviceGetAttribute"
    error_name_function = "hipGetErrorName"
    unnamed_error = (12345, "hipErrorUnrecognized")
    null_stream_handle = True
    probe_call = "hipInit"
    first_use_under_lock = ("hipDeviceGetName", "a.get_device_properties(1)")
    #: ROCm promises no staging for pageable memory: the backend waits
    pageable_copy_waits = ("hipStreamSynchronize",)

    fault_sites = (
        Site("hipInit", PROBE),
        Site("hipDriverGetVersion", TOLERATED,
             note="only the version text is lost"),
        Site("hipGetErrorName", REPORTER, "stream.query()", note="hipStreamQuery"),
        Site("hipGetErrorString", REPORTER, "stream.query()",
             note="hipStreamQuery"),
        Site("hipGetDeviceCount", PROBE),
        Site("hipInit", DEFERRED),
        Site("hipGetDeviceCount", DEFERRED),
        Site("hipSetDevice", RAISE, "set_device_index(1) in a new thread"),
        Site("hipSetDevice", RAISE, "with Stream(1) in a new thread"),
        Site("hipSetDevice", RAISE, "set_stream(Stream(1)) in a new thread"),
        Site("hipSetDevice", RAISE, "device_index(1) in a new thread"),
        Site("hipSetDevice", RAISE, "exit from device 1 in a new thread", nth=3),
        Site("hipSetDevice", RAISE, "Stream(1) from device 0"),
        # Restoring the caller's device after the work on device 1: a failed
        # restore leaves the thread on device 1 in HIP's own sense, which
        # would follow the rest of this process: a fresh one.
        Site("hipSetDevice", FRESH, "Stream(1) from device 0", nth=2),
        Site("hipSetDevice", FRESH, "get_memory_info(1) from device 0", nth=2),
        Site("hipGetDevice", RAISE, "Stream()"),
        Site("hipGetDevice", RAISE, "default stream query()"),
        Site("hipDeviceGetName", FRESH, "get_device_properties(0)"),
        Site("hipDeviceGetUuid", FRESH, "get_device_properties(0)"),
        Site("hipDeviceTotalMem", FRESH, "get_device_properties(0)"),
        Site("hipDeviceGetAttribute", FRESH, "get_device_properties(0)"),
        Site("hipDeviceSynchronize", RAISE, "synchronize(0)"),
        Site("hipDeviceGetStreamPriorityRange", FRESH, "Stream()"),
        Site("hipStreamCreateWithPriority", RAISE, "Stream()"),
        Site("hipStreamQuery", RAISE, "stream.query()"),
        Site("hipStreamQuery", RAISE, "default stream query()"),
        Site("hipStreamQuery", RAISE, "wrapped stream.query()"),
        Site("hipStreamSynchronize", RAISE, "stream.synchronize()"),
        Site("hipStreamSynchronize", RAISE, "default stream synchronize()"),
        Site("hipStreamSynchronize", RAISE, "wrapped stream.synchronize()"),
        # The wait that lets a pageable copy return.
        Site("hipStreamSynchronize", RAISE, "copy_from(bytes)"),
        Site("hipStreamSynchronize", RAISE, "copy_to(bytearray)"),
        Site("hipStreamWaitEvent", RAISE, "stream.wait_event()"),
        Site("hipStreamWaitEvent", RAISE, "event.wait(stream)"),
        Site("hipStreamWaitEvent", RAISE, "stream.wait_stream()"),
        Site("hipStreamDestroy", SILENT, "drop the objects",
             refused=(("stream", 1),)),
        Site("hipEventCreateWithFlags", RAISE, "first event.record()"),
        Site("hipEventCreateWithFlags", RAISE, "stream.record_event()"),
        Site("hipEventCreateWithFlags", RAISE, "stream.wait_stream()"),
        Site("hipEventRecord", RAISE, "first event.record()"),
        Site("hipEventRecord", RAISE, "event.record() again"),
        Site("hipEventRecord", RAISE, "stream.wait_stream()"),
        Site("hipEventQuery", RAISE, "event.query()"),
        Site("hipEventSynchronize", RAISE, "event.synchronize()"),
        Site("hipEventElapsedTime", RAISE, "elapsed_time()"),
        Site("hipEventDestroy", SILENT, "drop the objects",
             refused=(("event", 1),)),
        Site("hipMemGetInfo", RAISE, "get_memory_info(0)"),
        # Every call fails (nth=0): an out-of-memory error is retried once
        # after releasing the cache.
        Site("hipMalloc", RAISE, "Buffer()", nth=0),
        Site("hipMalloc", RAISE, "Buffer(1) from device 0", nth=0),
        Site("hipFree", SILENT, "drop a buffer"),
        Site("hipHostMalloc", RAISE, "HostBuffer()"),
        Site("hipHostFree", SILENT, "drop a host buffer",
             refused=(("host_alloc", 1),)),
        Site("hipMemcpyAsync", RAISE, "copy_from(bytes)"),
        Site("hipMemcpyAsync", RAISE, "copy_from(HostBuffer)"),
        Site("hipMemcpyAsync", RAISE, "copy_to(bytearray)"),
        Site("hipMemcpyAsync", RAISE, "copy_to(HostBuffer)"),
        Site("hipMemcpyAsync", RAISE, "copy_from(Buffer)"),
        Site("hipMemcpyPeerAsync", RAISE, "copy_from(Buffer of device 1)"),
        Site("hipMemsetD8Async", RAISE, "fill()"),
        Site("hipPointerGetAttributes", RAISE, "from_dlpack(capsule)"),
        Site("hipMemGetAddressRange", RAISE, "from_dlpack(capsule)"),
        Site("hipStreamIsCapturing", RAISE, "Graph.capture_begin()"),
        Site("hipStreamBeginCapture", RAISE, "Graph.capture_begin()"),
        Site("hipStreamEndCapture", RAISE, "Graph.capture_end()"),
        Site("hipGraphInstantiate", RAISE, "Graph.instantiate()"),
        Site("hipGraphLaunch", RAISE, "Graph.replay()"),
        Site("hipGraphExecDestroy", SILENT, "drop a graph",
             refused=(("graph_exec", 1),)),
        Site("hipGraphDestroy", SILENT, "drop a graph", refused=(("graph", 1),)),
        Site("hipModuleLoadData", RAISE, "Module()"),
        # hiprtc's target: the device's gcnArchName.
        Site("hipGetDeviceProperties", RAISE, "Module(source)"),
        Site("hipModuleGetFunction", RAISE, "get_kernel()"),
        Site("hipFuncGetAttribute", RAISE, "get_kernel()"),
        # The device's launch limits are read once per process.
        Site("hipDeviceGetAttribute", FRESH, "get_kernel()"),
        Site("hipModuleLaunchKernel", RAISE, "launch()"),
        Site("hipModuleUnload", SILENT, "drop a module",
             refused=(("module", 1),)),
        # Sharing with other processes, as on CUDA.
        Site("hipIpcGetMemHandle", RAISE, "Buffer.ipc_handle()"),
        Site("hipEventCreateWithFlags", RAISE,
             "first interprocess event.record()"),
        Site("hipEventRecord", RAISE, "first interprocess event.record()"),
        Site("hipIpcGetEventHandle", RAISE, "Event.ipc_handle()"),
        Site("hipIpcOpenMemHandle", RAISE,
             "Buffer.from_ipc_handle() of another process"),
        Site("hipIpcOpenMemHandle", RAISE,
             "Buffer.from_driver_ipc_handle() of another process"),
        Site("hipMemGetAddressRange", RAISE,
             "Buffer.from_driver_ipc_handle() of another process"),
        Site("hipIpcOpenEventHandle", RAISE,
             "Event.from_ipc_handle() of another process"),
        Site("hipIpcCloseMemHandle", SILENT,
             "drop a buffer of another process",
             refused=(("ipc_opened", 1),)),
        Site("hipEventDestroy", SILENT, "drop an event of another process",
             refused=(("event", 1), ("ipc_event_cells", 1))),
    )

    def __init__(self, path: pathlib.Path = HIP_DOUBLE) -> None:
        super().__init__(path, "hip")
        self.lib.fake_hip_enqueue_sleep.argtypes = [
            ctypes.c_int, ctypes.c_ulonglong, ctypes.c_double]
        self.lib.fake_hip_enqueue_sleep.restype = ctypes.c_int
        self.lib.fake_hip_event_sync_blocked.restype = ctypes.c_longlong
        self.lib.fake_hip_current_device.restype = ctypes.c_int
        self.lib.fake_hip_initialized.restype = ctypes.c_int

    #: as the NVML double for CUDA: a KFD topology of the double's machine
    #: lets the probe count without initialising the runtime
    eager_probe_env = {"ACCELERATOR_KFD_TOPOLOGY": "none"}
    eager_probe_config = "hip-without-kfd"
    counted_without_init = "KFD topology ("

    @classmethod
    def environment(cls, devices: int) -> dict[str, str]:
        return {**super().environment(devices),
                "ACCELERATOR_HIP_LIBRARY": str(HIP_DOUBLE),
                "ACCELERATOR_KFD_TOPOLOGY": str(kfd_topology(devices))}

    @classmethod
    def missing(cls) -> str | None:
        if HIP_DOUBLE.exists():
            return None
        return f"{HIP_DOUBLE} is missing: run make -C tests/drivers"

    def enqueue_sleep(self, stream: object, ms: float) -> None:
        rc = self.lib.fake_hip_enqueue_sleep(
            stream.device_index, stream.handle, ms)  # type: ignore[attr-defined]
        assert rc == 0, f"fake_hip_enqueue_sleep failed: {rc}"

    def _gate_target(self, stream: object) -> tuple[object, ...]:
        return (ctypes.c_int(stream.device_index),  # type: ignore[attr-defined]
                ctypes.c_ulonglong(stream.handle))  # type: ignore[attr-defined]

    def blocking_syncs(self) -> int:
        return self.lib.fake_hip_event_sync_blocked()

    def current_device(self) -> int:
        """The calling thread's current HIP device."""
        return self.lib.fake_hip_current_device()

    def initialized(self) -> bool:
        """Whether any runtime call has initialised the double."""
        return bool(self.lib.fake_hip_initialized())


def kfd_topology(gpus: int, cpus: int = 1) -> pathlib.Path:
    """A KFD topology nodes folder as the amdgpu driver publishes it in
    sysfs (/sys/class/kfd/kfd/topology/nodes): CPU nodes (gpu_id 0), then
    one node per GPU with a nonzero gpu_id.  Made once per shape under
    tests/drivers/build/kfd/, atomically (tests may run in parallel)."""
    import tempfile
    nodes = DRIVERS / "kfd" / f"{cpus}cpu-{gpus}gpu" / "nodes"
    if nodes.exists():
        return nodes
    nodes.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=nodes.parent))
    for node in range(cpus + gpus):
        (staging / str(node)).mkdir()
        gpu_id = 0 if node < cpus else 4000 + 1111 * (node - cpus + 1)
        (staging / str(node) / "gpu_id").write_text(f"{gpu_id}\n")
    try:
        staging.rename(nodes)
    except OSError:
        import shutil
        shutil.rmtree(staging)  # another process made it first
    return nodes


def opencl_runtime() -> str | None:
    """Why no OpenCL runtime with CPU devices (PoCL) is usable, or None."""
    import ctypes.util
    if ctypes.util.find_library("OpenCL") is None:
        return "no OpenCL ICD loader (apt-get install ocl-icd-libopencl1)"
    vendors = pathlib.Path(os.environ.get("OCL_ICD_VENDORS",
                                          "/etc/OpenCL/vendors"))
    if not any(vendors.glob("*pocl*")):
        return f"no PoCL in {vendors} (apt-get install pocl-opencl-icd)"
    return None


class OpenCLDouble(DriverDouble):
    """tests/drivers/build/libopencl_interposer.so over PoCL: a real
    OpenCL runtime on the CPU, with counters and faults on every call."""

    kernel_format = "opencl-c"
    kernel_address_args = False
    device_type = "opencl"
    display_type = "OpenCL"
    processor_label = "compute units"
    torch_device_type = 4
    dlpack_device_type = 4
    lacks = {
        "cuda_stream_protocol": "OpenCL queues are not CUDA streams",
        "blocking_sync": "OpenCL has no blocking-synchronization flag",
        "priorities": "core OpenCL queues have no priorities",
        "ipc": ("OpenCL has no interprocess memory or events "
                "(cl_khr_external_memory is an optional extension, which "
                "PoCL 3.1 lacks)"),
        "pci_bus_id": ("core OpenCL has no PCI address (PoCL's CPU "
                       "devices lack cl_khr_pci_bus_info)"),
        "free_memory": ("OpenCL cannot say how much device memory is free: "
                        "get_memory_info reports the total less what this "
                        "process allocated, and the properties list it "
                        "among the estimates"),
        "set_total_memory": ("PoCL's device memory size cannot be set "
                             "to the sizes a test needs"),
        "driver_events": ("an OpenCL event is a host object holding the "
                          "marker of its latest record: there is no "
                          "driver event to create or reuse"),
        "graphs": ("OpenCL graphs would be command buffers "
                   "(cl_khr_command_buffer), which as PoCL 3.1 has them "
                   "record no SVM copies or fills and no event markers: "
                   "accelerator.Graph is refused on OpenCL"),
    }
    symbol_lists = (("csrc/backends/opencl/opencl_api.h", "ACC_OPENCL_FUNCTIONS"),)
    library_env = "ACCELERATOR_OPENCL_LIBRARY"
    stream_create_api = "clCreateCommandQueueWithProperties"
    functions = {"stream_create": "clCreateCommandQueueWithProperties",
                 "event_record": "clEnqueueMarkerWithWaitList",
                 "query": "clGetEventInfo",
                 "event_synchronize": "clWaitForEvents",
                 "mem_alloc": "clSVMAlloc", "mem_free": "clSVMFree",
                 "mem_fill": "clEnqueueSVMMemFill"}
    env_devices = "POCL_DEVICES"
    kinds = {"stream": "queue"}
    live_kinds = ("queue", "event", "context", "alloc", "host_alloc",
                  "bad_access", "guard_damage", "program", "kernel")
    fail_env = "FAKE_OCL_FAIL"
    probe_call = "clGetPlatformIDs"
    first_use_under_lock = ("clCreateCommandQueueWithProperties",
                            "a.current_stream(1)")
    unknown_error = (-59, "CL_INVALID_OPERATION")
    oom_error = (-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE")
    # PoCL's CPU devices announce cl_khr_fp64 but not cl_khr_fp16.
    float_dtypes = frozenset({"float64", "complex128"})
    fewer_float_dtypes = ({"FAKE_OCL_HIDE_EXTENSIONS": "cl_khr_fp64"},
                          frozenset({"float64", "complex128"}))
    capability_call = "clGetDeviceInfo"

    fault_sites = (
        Site("clGetPlatformIDs", PROBE),
        Site("clGetPlatformInfo", TOLERATED,
             note="only the version text is lost"),
        Site("clGetDeviceIDs", PROBE),
        Site("clGetDeviceInfo", FRESH, "get_device_properties(0)"),
        # The extensions list: its size, then the list (dtype support).
        Site("clGetDeviceInfo", FRESH, "get_device_properties(0)", nth=6),
        Site("clGetDeviceInfo", FRESH, "get_device_capability(0)", nth=7),
        Site("clGetDeviceInfo", RAISE, "get_memory_info(0)"),
        Site("clCreateContext", FRESH, "Stream()", prepare="nothing"),
        Site("clCreateContext", FRESH, "default stream query()"),
        Site("clReleaseContext", EXIT),
        Site("clCreateCommandQueueWithProperties", RAISE, "Stream()"),
        Site("clCreateCommandQueueWithProperties", FRESH,
             "default stream query()"),
        Site("clGetCommandQueueInfo", RAISE, "wrapped stream.query()"),
        # Wrapping also asks the queue's context (memory refuses another's).
        Site("clGetCommandQueueInfo", RAISE, "wrapped stream.query()", nth=2),
        Site("clRetainCommandQueue", RAISE, "synchronize(0)"),
        Site("clReleaseCommandQueue", SILENT, "drop the objects",
             refused=(("queue", 1),)),
        Site("clFlush", RAISE, "first event.record()"),
        Site("clFlush", RAISE, "stream.query()"),
        Site("clFlush", RAISE, "stream.wait_event()"),
        Site("clFinish", RAISE, "stream.synchronize()"),
        Site("clFinish", RAISE, "default stream synchronize()"),
        Site("clFinish", RAISE, "wrapped stream.synchronize()"),
        Site("clFinish", RAISE, "synchronize(0)"),
        Site("clEnqueueMarkerWithWaitList", RAISE, "first event.record()"),
        Site("clEnqueueMarkerWithWaitList", RAISE, "event.record() again"),
        Site("clEnqueueMarkerWithWaitList", RAISE, "stream.query()"),
        Site("clEnqueueMarkerWithWaitList", RAISE, "stream.wait_stream()"),
        Site("clEnqueueBarrierWithWaitList", RAISE, "stream.wait_event()"),
        Site("clEnqueueBarrierWithWaitList", RAISE, "event.wait(stream)"),
        Site("clEnqueueBarrierWithWaitList", RAISE, "stream.wait_stream()"),
        Site("clGetEventInfo", RAISE, "event.query()"),
        Site("clGetEventInfo", RAISE, "stream.query()"),
        Site("clGetEventInfo", RAISE, "elapsed_time()"),
        Site("clGetEventProfilingInfo", RAISE, "elapsed_time()"),
        Site("clWaitForEvents", RAISE, "event.synchronize()"),
        Site("clRetainEvent", RAISE, "event.query()"),
        Site("clRetainEvent", RAISE, "event.synchronize()"),
        Site("clRetainEvent", RAISE, "stream.wait_event()"),
        Site("clReleaseEvent", SILENT, "event.record() after completion",
             refused=(("event", 1),)),
        # The SVM capabilities are read once per device, at its first
        # allocation; every call fails (nth=0), since an out-of-memory error
        # is retried once after releasing the cache.
        Site("clGetDeviceInfo", FRESH, "Buffer()", prepare="on_device_0", nth=0),
        Site("clGetDeviceInfo", FRESH, "HostBuffer()", prepare="on_device_0"),
        Site("clSVMAlloc", NULLED, "Buffer()", nth=0),
        Site("clSVMAlloc", NULLED, "Buffer(1) from device 0", nth=0),
        Site("clSVMAlloc", NULLED, "HostBuffer()"),
        # clSVMFree cannot fail visibly: a refused free is memory lost.
        Site("clSVMFree", SILENT, "drop a buffer", refused=(("alloc", 1),)),
        Site("clSVMFree", SILENT, "drop a lone host buffer",
             refused=(("host_alloc", 1),)),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_from(bytes)"),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_from(HostBuffer)"),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_to(bytearray)"),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_to(HostBuffer)"),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_from(Buffer)"),
        Site("clEnqueueSVMMemcpy", RAISE, "copy_from(Buffer of device 1)"),
        Site("clEnqueueSVMMemFill", RAISE, "fill()"),
        Site("clFlush", RAISE, "fill()"),
        Site("clFlush", RAISE, "copy_from(HostBuffer)"),
        Site("clCreateProgramWithSource", RAISE, "Module()"),
        Site("clBuildProgram", RAISE, "Module()"),
        # Only a failed build asks for its log: lost, the BuildError stays.
        Site("clGetProgramBuildInfo", SILENT, "Module(broken code)"),
        # The kernel names only complete a KeyError's message.
        Site("clGetProgramInfo", SILENT, "get_kernel(unknown name)"),
        Site("clReleaseProgram", SILENT, "drop a module",
             refused=(("program", 1),)),
        Site("clCreateKernel", RAISE, "get_kernel()"),
        Site("clReleaseKernel", SILENT, "drop a module",
             refused=(("kernel", 1),)),
        Site("clGetKernelInfo", RAISE, "get_kernel()"),
        Site("clGetKernelArgInfo", RAISE, "get_kernel()"),
        Site("clGetKernelArgInfo", RAISE, "get_kernel()", nth=2),
        Site("clGetKernelWorkGroupInfo", RAISE, "get_kernel()"),
        Site("clGetDeviceInfo", RAISE, "get_kernel()"),
        Site("clSetKernelArgSVMPointer", RAISE, "launch()"),
        Site("clSetKernelArg", RAISE, "launch()"),
        Site("clEnqueueNDRangeKernel", RAISE, "launch()"),
        Site("clFlush", RAISE, "launch()"),
    )

    def __init__(self, path: pathlib.Path = OPENCL_INTERPOSER) -> None:
        super().__init__(path, "ocl")
        self.lib.fake_ocl_enqueue_sleep.argtypes = [
            ctypes.c_ulonglong, ctypes.c_double]
        self.lib.fake_ocl_enqueue_sleep.restype = ctypes.c_int

    @classmethod
    def environment(cls, devices: int) -> dict[str, str]:
        # PoCL's pthread driver, once per device, on the CPU.
        return {"ACCELERATOR_BACKEND": cls.device_type,
                "ACCELERATOR_OPENCL_LIBRARY": str(OPENCL_INTERPOSER),
                "ACCELERATOR_OPENCL_DEVICE_TYPE": "all",
                "POCL_DEVICES": " ".join(["pthread"] * devices)}

    @classmethod
    def missing(cls) -> str | None:
        if not OPENCL_INTERPOSER.exists():
            return (f"{OPENCL_INTERPOSER} is missing: run make -C "
                    "tests/drivers")
        return opencl_runtime()

    #: the backend asks clSVMAlloc for OCL_ALIGN - 1 bytes more than
    #: mem_alloc's size and hands out the first OCL_ALIGN-aligned byte; its
    #: own table (which from_dlpack consults: OpenCL cannot look a pointer
    #: up) holds that range
    svm_alignment = 256

    def mem_range(self, ptr: int) -> tuple[int, int, int]:
        kind, base, size = super().mem_range(ptr)
        if kind != 1:
            return kind, base, size
        slack = self.svm_alignment - 1
        aligned = (base + slack) & ~slack
        return kind, aligned, size - slack

    def enqueue_sleep(self, stream: object, ms: float) -> None:
        rc = self.lib.fake_ocl_enqueue_sleep(
            stream.handle, ms)  # type: ignore[attr-defined]
        assert rc == 0, f"fake_ocl_enqueue_sleep failed: {rc}"


class HipPluginDouble(HipDouble):
    """The HIP double under the HIP backend built from its folder as a
    plugin of its own (tests/check_wheel.sh plugin): the same backend code
    and driver, named plugin_hip, found through its distribution's entry
    point.  The built-in HIP backend reads the same variables, and is
    probed only for backends()."""

    device_type = "plugin_hip"
    eager_probe_config = "plugin_hip-without-kfd"


#: device type -> the double class of that backend
DOUBLES: dict[str, type[DriverDouble]] = {
    cls.device_type: cls for cls in (CudaDouble, ZeDouble, HipDouble,
                                      OpenCLDouble)}
#: backends the behaviour suite runs on as plugins (ACCELERATOR_TEST_BACKEND
#: names one): in that configuration the plugin is one of its backends, in
#: probe order after the built-in ones
PLUGIN_DOUBLES: dict[str, type[DriverDouble]] = {
    HipPluginDouble.device_type: HipPluginDouble}
if TEST_BACKEND in PLUGIN_DOUBLES:
    DOUBLES[TEST_BACKEND] = PLUGIN_DOUBLES[TEST_BACKEND]


def configurations() -> dict[str, type[DriverDouble]]:
    """Every backend's test configurations (DriverDouble.configurations),
    in probe order: name -> the double class underneath."""
    return {name: cls for cls in DOUBLES.values()
            for name in cls.configurations()}


def params(configs: dict[str, type[DriverDouble]]) -> list:
    """pytest parameters for those configurations, each skipped, with the
    reason, where its double (or runtime) is missing."""
    import pytest
    return [pytest.param(name, marks=pytest.mark.skipif(
                cls.missing() is not None, reason=cls.missing() or ""))
            for name, cls in configs.items()]


def under_test() -> type[DriverDouble]:
    """The double class of the backend the behaviour suite runs on (for
    ACCELERATOR_TEST_BACKEND=real: of the accelerator found, whose facts
    hold for the real driver too)."""
    if TEST_BACKEND in DOUBLES:
        return DOUBLES[TEST_BACKEND]
    import accelerator
    current = accelerator.current_accelerator()
    return DOUBLES[current.type if current is not None else "cuda"]


def clean_environment() -> dict[str, str]:
    """os.environ without the variables that configure backends or doubles."""
    prefixes = ("ACCELERATOR_", "FAKE_CUDA_", "FAKE_NVML_", "FAKE_ZE_",
                "FAKE_OCL_", "FAKE_HIP_", "ZE_", "ZEL_", "ZES_", "CUDA_VISIBLE_DEVICES",
                "POCL_", "OCL_ICD_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
