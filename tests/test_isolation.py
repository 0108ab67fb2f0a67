"""Module instances are isolated: a re-import and a subinterpreter each
hand out their own objects.

The C core is process-global (a thread's current stream is one core
stream whichever module instance asks), but Python objects belong to one
module instance: after the extension is imported again (its entries
deleted from sys.modules) or in a subinterpreter, current_stream() must
return a Stream of that instance's own type, which its set_stream()
accepts.  The types are immutable like the built-ins, and the built
extension exports PyInit__accelerator alone.  Each case runs in a fresh
interpreter, once per backend.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
import kernel_code
from fake_drivers import REPO


def backend_params() -> list:
    """Every backend whose double (or runtime) is here, by device type."""
    return fake_drivers.params(fake_drivers.DOUBLES)


def run(backend: str, code: str, timeout: float = 120) -> str:
    env = fake_drivers.clean_environment()
    env.update(fake_drivers.DOUBLES[backend].environment(2))
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


REIMPORT = """
import gc, sys
import accelerator as a1
first = sys.modules["accelerator._accelerator"]
mine = a1.Stream(1)
a1.set_stream(mine)                  # device 1, stream `mine`, this thread
for name in [n for n in sys.modules
             if n == "accelerator" or n.startswith("accelerator.")]:
    del sys.modules[name]
import accelerator as a2
assert sys.modules["accelerator._accelerator"] is not first
assert a2.Stream is not a1.Stream

# The same core stream, as an object of the new instance's own type.
cur = a2.current_stream()
assert type(cur) is a2.Stream, type(cur)
assert cur is a2.current_stream() and cur is a2.current_stream(1)
assert cur == a2.Stream.from_handle(mine.handle, 1)
assert cur.handle == mine.handle and cur.device_index == 1
a2.set_stream(cur)
with cur:
    assert a2.current_stream() is cur
e = a2.Event()
e.record()
assert type(cur.record_event()) is a2.Event
e.synchronize()
a2.synchronize(1)

# The first instance still hands out its own object.
assert a1.current_stream() is mine

# Either instance's object may die first; the other keeps working.
handle = mine.handle
del mine
gc.collect()
again = a1.current_stream()
assert type(again) is a1.Stream and again.handle == handle
assert a2.current_stream() is cur
del cur
gc.collect()
assert type(a2.current_stream()) is a2.Stream
assert a1.current_stream() is again
a1.set_stream(a1.current_stream(0))
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_a_reimported_module_hands_out_its_own_streams(backend: str) -> None:
    assert run(backend, REIMPORT).strip() == "ok"


SUBINTERPRETER = """
import sys
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters
import accelerator as a
mine = a.Stream(1)
a.set_stream(mine)
code = '''
import accelerator as a
cur = a.current_stream()
assert type(cur) is a.Stream, type(cur)
assert cur is a.current_stream()
assert cur.handle == HANDLE and cur.device_index == 1
a.set_stream(cur)
e = a.Event()
e.record(cur)
e.synchronize()
other = a.Stream(0)
a.set_stream(other)
assert a.current_stream() is other
a.set_stream(cur)
del e, other
'''.replace("HANDLE", str(mine.handle))
for _ in range(3):                   # a new interpreter each time
    interp = interpreters.create()
    interpreters.run_string(interp, code)
    interpreters.destroy(interp)
assert a.current_stream() is mine
a.Event().record(mine)
mine.synchronize()
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_a_subinterpreter_hands_out_its_own_streams(backend: str) -> None:
    assert run(backend, SUBINTERPRETER).strip() == "ok"


SUBINTERPRETER_DLPACK = """
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters
import accelerator as a
code = '''
import accelerator as a
b = a.Buffer(64)
cap = b.__dlpack__()
del cap                                  # an unconsumed capsule
w = a.from_dlpack(b.__dlpack__(max_version=(1, 0)))
del w                                    # a consumed one
b.close()
left = a.Buffer(64)
kept = left.__dlpack__()                 # alive when the interpreter ends
import warnings
with warnings.catch_warnings():          # numpy's word on subinterpreters
    warnings.simplefilter("ignore")
    import numpy as np
h = a.HostBuffer(64)
x = np.from_dlpack(h)                    # another consumer's deleter call
del x
h.close()
'''
interp = interpreters.create()
interpreters.run_string(interp, code)
interpreters.destroy(interp)
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_dlpack_capsules_die_in_a_subinterpreter(backend: str) -> None:
    """A capsule of ours dropped in a subinterpreter, or an array numpy
    made of one there, released its export through PyGILState_Ensure,
    which waited for ever for the GIL that the thread held under the
    subinterpreter's thread state."""
    assert run(backend, SUBINTERPRETER_DLPACK, timeout=30).strip() == "ok"


SUBINTERPRETER_FOREIGN_RELEASE = """
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters
import accelerator as a
code = r'''
import ctypes, sys
sys.path.insert(0, @TESTS@)
import accelerator as a
import fake_drivers
facts = fake_drivers.DOUBLES[@BACKEND@]
driver = facts()

class DLDevice(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("id", ctypes.c_int32)]

class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8),
                ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]

class DLManagedTensor(ctypes.Structure):   # no deleter: nothing to call
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]

new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype = ctypes.py_object
new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
under = a.Buffer(64)
# The tensor and its shape in malloc'd memory, valid until the deleter
# (none here) is called, as DLPack asks of a producer: ctypes objects of
# this interpreter would be freed at its end, before a release that
# still waits.  The few bytes leak on purpose.
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
shape = (ctypes.c_int64 * 1).from_address(libc.malloc(8))
shape[0] = 64
tensor = DLManagedTensor.from_address(
    libc.malloc(ctypes.sizeof(DLManagedTensor)))
ctypes.memset(ctypes.addressof(tensor), 0, ctypes.sizeof(tensor))
tensor.dl_tensor.data = under.ptr
tensor.dl_tensor.device = DLDevice(facts.dlpack_device_type, 0)
tensor.dl_tensor.ndim = 1
tensor.dl_tensor.code, tensor.dl_tensor.bits, tensor.dl_tensor.lanes = 1, 8, 1
tensor.dl_tensor.shape = shape
wrapped = a.from_dlpack(new_capsule(ctypes.addressof(tensor), b"dltensor",
                                    None))      # a foreign wrapper
side = a.Stream()
gate = driver.gate(side)
wrapped.fill(1, stream=side)
wrapped.close()              # its release waits behind the gate
gate.open()
side.synchronize()           # ready, not yet run
module = a.Module(open(@CODE@, "rb").read())
del module                   # a drop runs the ready releases
left = a.Buffer(64)          # and so does every allocation
left.close()
under.close()
'''
for _ in range(2):
    interp = interpreters.create()
    interpreters.run_string(interp, code)
    interpreters.destroy(interp)
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_a_foreign_release_runs_in_its_subinterpreter(
        backend: str, tmp_path) -> None:
    """A from_dlpack() wrapper's release, ready when a Module dropped in a
    subinterpreter ran it, took the GIL with PyGILState_Ensure (the main
    interpreter's thread state), which waited for ever for the GIL the
    thread held under the subinterpreter's."""
    run_with_module(backend, tmp_path, SUBINTERPRETER_FOREIGN_RELEASE,
                    "a foreign release run in a subinterpreter hung")


def run_with_module(backend: str, tmp_path, script: str,
                    hung: str) -> None:
    """Run script in a child on backend, its @TESTS@, @BACKEND@ and
    @CODE@ (a module of the backend's format, written to tmp_path)
    filled in; it must print ok within a minute, else fail with hung."""
    path = tmp_path / "code.bin"
    path.write_bytes(kernel_code.for_format(
        fake_drivers.DOUBLES[backend].kernel_format))
    code = (script.replace("@TESTS@", repr(str(REPO / "tests")))
            .replace("@BACKEND@", repr(backend))
            .replace("@CODE@", repr(str(path))))
    try:
        out = run(backend, code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(hung)
    assert out.strip() == "ok"


SUBINTERPRETER_ENDS_BEFORE_RELEASE = """
import sys
sys.path.insert(0, @TESTS@)
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters
import accelerator as a
import fake_drivers
driver = fake_drivers.DOUBLES[@BACKEND@]()
side = a.Stream()
for _ in range(2):
    gate = driver.gate(side)
    interp = interpreters.create()
    interpreters.run_string(interp, @SUB@.replace("HANDLE", str(side.handle)))
    gate.open_soon(0.3)
    interpreters.destroy(interp)     # its wrapper's release still waits
    gate.open()
    side.synchronize()
    module = a.Module(open(@CODE@, "rb").read())
    del module                       # runs the ready releases
    a.Buffer(64).close()
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_a_subinterpreter_ends_before_its_foreign_release(
        backend: str, tmp_path) -> None:
    """A subinterpreter destroyed while its from_dlpack() wrapper's
    release still waited for the wrapper's work (queued on a stream the
    main interpreter holds closed): the release, run later by the main
    interpreter, made a thread state of the freed interpreter (heap
    corruption, an abort)."""
    # The foreign wrapper of SUBINTERPRETER_FOREIGN_RELEASE, its work
    # queued on the main interpreter's stream, closed, left waiting.
    sub = SUBINTERPRETER_FOREIGN_RELEASE.split("code = r\'\'\'")[1]
    sub = sub.split("side = a.Stream()")[0]
    sub += ("side = a.Stream.from_handle(HANDLE, 0)\n"
            "wrapped.fill(1, stream=side)\n"
            "wrapped.close()\n"
            "under.close()\n")
    sub = (sub.replace("@TESTS@", repr(str(REPO / "tests")))
           .replace("@BACKEND@", repr(backend)))
    run_with_module(backend, tmp_path,
                    SUBINTERPRETER_ENDS_BEFORE_RELEASE.replace(
                        "@SUB@", repr(sub)),
                    "ending a subinterpreter with a release waiting hung")


def test_stream_and_event_types_are_immutable() -> None:
    import accelerator as acc
    for cls in (acc.Stream, acc.Event, acc.device, acc.Graph, acc.Buffer,
                acc.HostBuffer, acc.device_index):
        with pytest.raises(TypeError, match="immutable"):
            cls.query = None  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match="immutable"):
            del cls.__repr__  # type: ignore[misc]
    # Still subclassable, as torch's are.
    assert issubclass(type("MyStream", (acc.Stream,), {}), acc.Stream)


@pytest.mark.skipif(shutil.which("nm") is None,
                    reason="nm (binutils) is not installed")
def test_the_extension_exports_only_its_init_function() -> None:
    import accelerator._accelerator as ext
    result = subprocess.run(["nm", "-D", "--defined-only", ext.__file__],
                            capture_output=True, text=True, check=True)
    if "__gcov_" in result.stdout:
        pytest.skip("the coverage build links libgcov, whose runtime "
                    "exports its own symbols; the plain build is checked")
    names = {line.split()[-1] for line in result.stdout.splitlines()
             if len(line.split()) == 3 and line.split()[1] in "TDBRVW"}
    assert names == {"PyInit__accelerator"}, sorted(names)
    assert os.path.getsize(ext.__file__) > 0


CROSS_INSTANCE = """
import sys
import accelerator as a1
del sys.modules["accelerator"], sys.modules["accelerator._accelerator"]
import accelerator as a2
assert a2 is not a1
calls = {
    "set_stream": lambda: a2.set_stream(a1.Stream(0)),
    "wait_event": lambda: a2.Stream(0).wait_event(a1.Event()),
    "elapsed_time": lambda: a2.Event().elapsed_time(a1.Event()),
    "record": lambda: a2.Event().record(a1.Stream(0)),
    "copy_from": lambda: a2.Buffer(8).copy_from(a1.Buffer(8)),
    "copy_to": lambda: a2.Buffer(8).copy_to(a1.Buffer(8)),
}
for name, call in calls.items():
    try:
        call()
    except TypeError as exc:
        assert "another instance of the accelerator module" in str(exc), exc
    else:
        raise AssertionError(name + " took another instance's object")
# This instance's own wrong type is named plainly.
try:
    a2.set_stream(a2.Event())
except TypeError as exc:
    assert str(exc).endswith("got Event"), exc
print("ok")
"""


CROSS_INSTANCE_LAUNCH = """
import sys
sys.path.insert(0, {tests!r})
import kernel_code
import accelerator as a1
theirs = a1.Buffer(64)
del sys.modules["accelerator"], sys.modules["accelerator._accelerator"]
import accelerator as a2
kernel = a2.Module(kernel_code.for_format({fmt!r})).get_kernel("add_one")
try:
    a2.launch(kernel, 1, 64, theirs, 64)
except TypeError as exc:
    text = str(exc)
    assert ("got a Buffer of another instance of the accelerator module"
            in text), text
    assert "a a " not in text, text
else:
    raise AssertionError("launch took another instance's Buffer")
print("ok")
"""


@pytest.mark.parametrize("backend", backend_params())
def test_launch_names_another_instances_buffer_plainly(backend: str) -> None:
    fmt = fake_drivers.DOUBLES[backend].kernel_format
    if not fmt:
        pytest.skip("the backend has no kernels")
    code = CROSS_INSTANCE_LAUNCH.format(tests=str(REPO / "tests"), fmt=fmt)
    assert run(backend, code).strip() == "ok"


@pytest.mark.parametrize("backend", backend_params())
def test_another_instances_object_is_refused_by_name(backend: str) -> None:
    """Another instance's Stream reads "got a Stream of another instance
    of the accelerator module", not the puzzling "expected an
    accelerator.Stream, got Stream"."""
    assert run(backend, CROSS_INSTANCE).strip() == "ok"
