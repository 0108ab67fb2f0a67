"""The public surface: names, signatures from docstrings, import cost."""
from __future__ import annotations

import inspect
import os
import pathlib
import subprocess
import sys

import pytest

import accelerator

TORCH_NAMES = {
    "is_available", "current_accelerator", "device_count",
    "current_device_index", "current_device_idx", "set_device_index",
    "set_device_idx", "device_index", "current_stream", "set_stream",
    "synchronize", "get_memory_info",
}


def test_all_names_exist_and_cover_torch_accelerator() -> None:
    for name in accelerator.__all__:
        assert hasattr(accelerator, name), name
    assert TORCH_NAMES <= set(accelerator.__all__)
    assert {"device", "Stream", "Event", "AcceleratorError",
            "OutOfMemoryError"} <= set(accelerator.__all__)


def public_callables():
    for name in accelerator.__all__:
        obj = getattr(accelerator, name)
        if inspect.isclass(obj):
            if issubclass(obj, BaseException) or name == "DeviceProperties":
                continue
            yield name, obj
            for attr, member in vars(obj).items():
                if callable(member) and (not attr.startswith("_") or attr in (
                        "__enter__", "__exit__", "__cuda_stream__")):
                    yield f"{name}.{attr}", getattr(obj, attr)
        elif callable(obj):
            yield name, obj


def test_every_callable_has_a_signature_and_a_docstring() -> None:
    seen = 0
    for name, obj in public_callables():
        signature = inspect.signature(obj)
        assert signature is not None, name
        doc = inspect.getdoc(obj)
        assert doc and len(doc) > 20, f"{name} lacks a docstring"
        seen += 1
    assert seen >= 30


def test_signatures_read_as_documented() -> None:
    assert str(inspect.signature(accelerator.synchronize)) == "(device=None, /)"
    assert str(inspect.signature(accelerator.Stream)) == (
        "(device=None, *, priority=0, stream_id=None, device_index=None, "
        "device_type=None)")
    assert str(inspect.signature(accelerator.Event)) == (
        "(device=None, *, enable_timing=False, blocking=False, "
        "interprocess=False)")
    assert str(inspect.signature(accelerator.set_device_index)) == (
        "(device, /)")
    # launch() takes kernel, grid and block by position only (the C
    # function counts them in nargs): the stubs say so too.
    assert str(inspect.signature(accelerator.launch)) == (
        "(kernel, grid, block, /, *args, shared_mem=0, stream=None)")
    assert str(inspect.signature(accelerator.Module)) == (
        "(code, *, format=None, options=None, device=None, "
        "name_expressions=None)")
    assert str(inspect.signature(accelerator.Module.from_file)) == (
        "(path, *, format=None, options=None, device=None, "
        "name_expressions=None)")


def test_factory_only_types_cannot_be_made_by_hand() -> None:
    """A type only a factory makes (Kernel: Module.get_kernel()) says so
    with Py_TPFLAGS_DISALLOW_INSTANTIATION, not a tp_new of its own that
    raises: calling it, or its __new__, is a TypeError either way."""
    disallow_instantiation = 1 << 7
    kernel = accelerator.Kernel
    assert kernel.__flags__ & disallow_instantiation
    assert "__new__" not in vars(kernel)
    with pytest.raises(TypeError, match="cannot create "
                       "'accelerator.Kernel' instances"):
        kernel()
    with pytest.raises(TypeError, match="accelerator.Kernel"):
        kernel.__new__(kernel)


def test_exception_hierarchy() -> None:
    assert issubclass(accelerator.AcceleratorError, RuntimeError)
    assert issubclass(accelerator.OutOfMemoryError,
                      accelerator.AcceleratorError)
    for base in (IndexError, ValueError, RuntimeError):
        assert issubclass(accelerator.DeviceIndexError, base)
    error = accelerator.AcceleratorError("x")
    assert (error.backend, error.api, error.code, error.error_name) == (
        None, None, None, None)


def test_dir_shows_the_api_only() -> None:
    """No helper module or future import among the public names, in a
    fresh interpreter (here pytest has loaded the pytest plugin, a
    submodule, and rewritten its asserts)."""
    code = ("import accelerator, accelerator.memory\n"
            "for m in (accelerator, accelerator.memory):\n"
            "    print(m.__name__, [n for n in dir(m) if not n.startswith('_')"
            " and n not in m.__all__])\n")
    env = {**os.environ,
           "PYTHONPATH": str(pathlib.Path(accelerator.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "accelerator []\naccelerator.memory []\n"
