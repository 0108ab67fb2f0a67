"""The core's reader of AMD GPU code object metadata (csrc/core/hsaco_table.c).

ROCm 5.2 tells no kernel's parameters, so the core reads them from the
code object's NT_AMDGPU_METADATA note, a MessagePack map.  Here the reader
runs on its own, in a small C program (tests/drivers/check_hsaco_table.c)
built with AddressSanitizer and UBSan: on code objects that hiprtc (in
Debian's ROCm 5.2 runtime) builds, on hand-made images whose metadata is
hostile (deep nesting, lying lengths and counts, strings with NULs, values
of the wrong type, arguments beyond the kernel's), and on thousands of
truncated and corrupted copies of a real one, each in a heap block of
exactly its size, so that a read past the end fails the run.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

import kernel_code
from fake_drivers import REPO

DRIVERS = REPO / "tests" / "drivers"

#: kinds, as acc_param_kind numbers them
POINTER, OTHER = 1, 5


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    program = tmp_path_factory.mktemp("hsaco") / "check_hsaco_table"
    build = kernel_code.sanitized_program(
        program, [DRIVERS / "check_hsaco_table.c",
                  REPO / "csrc" / "core" / "hsaco_table.c"],
        [f"-I{REPO / 'csrc' / 'include'}"], [])
    assert build.returncode == 0, build.stderr
    return program


def run(checker: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run([str(checker), *args], capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr   # no sanitizer report
    return json.loads(result.stdout)


def show(checker: Path, tmp_path: Path, image: bytes) -> dict:
    path = tmp_path / "image.hsaco"
    path.write_bytes(image)
    return run(checker, "show", str(path))


# A MessagePack encoder (the subset the metadata uses), and ELF images
# made around a note -----------------------------------------------------

class Raw(bytes):
    """Bytes placed as they are (a hostile encoding)."""


def pack(value: object) -> bytes:
    if isinstance(value, Raw):
        return bytes(value)
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 0x80:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack("b", value)
        if value < 0:
            return b"\xd3" + struct.pack(">q", value)
        return b"\xcf" + struct.pack(">Q", value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode()
        return b"\xdb" + struct.pack(">I", len(data)) + data
    if isinstance(value, list):
        return b"\xdd" + struct.pack(">I", len(value)) + b"".join(
            map(pack, value))
    if isinstance(value, dict):
        return b"\xdf" + struct.pack(">I", len(value)) + b"".join(
            pack(k) + pack(v) for k, v in value.items())
    raise TypeError(value)


def note(desc: bytes, owner: bytes = b"AMDGPU\0", kind: int = 32) -> bytes:
    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)
    return struct.pack("<III", len(owner), len(desc), kind) + pad(owner) \
        + pad(desc)


def elf(notes: bytes, machine: int = 224, segment: bool = False) -> bytes:
    """An ELF64 shared object holding notes in a SHT_NOTE section (with a
    null section before it), or in a PT_NOTE segment without sections."""
    at = 64 + (56 if segment else 0)
    body = notes
    if segment:
        header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" +
                             b"\x40\x02" + b"\0" * 7, 3, machine, 1, 0, 64,
                             0, 0x3f, 64, 56, 1, 64, 0, 0)
        phdr = struct.pack("<IIQQQQQQ", 4, 4, at, 0, 0, len(notes),
                           len(notes), 4)
        return header + phdr + body
    shoff = at + len(body)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" +
                         b"\x40\x02" + b"\0" * 7, 3, machine, 1, 0, 0, shoff,
                         0x3f, 64, 56, 0, 64, 2, 0)
    null = b"\0" * 64
    section = struct.pack("<IIQQQQIIQQ", 0, 7, 2, 0, at, len(notes), 0, 0, 4,
                          0)
    return header + body + null + section


def kernel(**fields: object) -> dict:
    base = {".name": "k", ".symbol": "k.kd", ".kernarg_segment_size": 24,
            ".args": [
                {".size": 8, ".offset": 0, ".value_kind": "global_buffer",
                 ".address_space": "global"},
                {".size": 4, ".offset": 8, ".value_kind": "by_value"},
                {".size": 8, ".offset": 16,
                 ".value_kind": "hidden_global_offset_x"}],
            ".max_flat_workgroup_size": 256,
            ".group_segment_fixed_size": 128,
            ".private_segment_fixed_size": 16, ".sgpr_count": 10,
            ".vgpr_count": 7, ".wavefront_size": 64,
            ".language_version": [2, 0], ".uses_dynamic_stack": False}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def metadata(*kernels: dict, **extra: object) -> bytes:
    return pack({"amdhsa.version": [1, 1],
                 "amdhsa.target": "amdgcn-amd-amdhsa--gfx90a",
                 "amdhsa.kernels": list(kernels), **extra})


# Code objects hiprtc builds -------------------------------------------------

needs_hiprtc = pytest.mark.skipif(kernel_code.hiprtc_missing() is not None,
                                  reason=str(kernel_code.hiprtc_missing()))


@needs_hiprtc
def test_the_parameters_of_a_code_object_hiprtc_built(
        checker: Path, tmp_path: Path) -> None:
    table = show(checker, tmp_path, kernel_code.hsaco(kernel_code.HIP_C))
    assert table["target"] == "amdgcn-amd-amdhsa--gfx90a"
    kernels = {k["name"]: k for k in table["kernels"]}
    assert set(kernels) == {"saxpy", "add_one", "bounded", "by_struct",
                            "prints"}
    saxpy = kernels["saxpy"]
    # saxpy(float *y, const float *x, float a, unsigned n)
    assert saxpy["symbol"] == "saxpy.kd"
    assert saxpy["params"] == [[8, 0, POINTER], [8, 8, POINTER],
                               [4, 16, OTHER], [4, 20, OTHER]]
    assert saxpy["kernarg_bytes"] >= 24
    assert saxpy["max_threads"] == 1024 and saxpy["group_bytes"] == 0
    assert saxpy["vgprs"] > 0 and saxpy["sgprs"] > 0
    assert (saxpy["info"], saxpy["info_nparams"]) == (1, 4)
    assert kernels["add_one"]["params"] == [[8, 0, POINTER], [4, 8, OTHER]]
    bounded = kernels["bounded"]
    assert (bounded["max_threads"], bounded["group_bytes"]) == (256, 256)
    # A struct passes by value: its bytes, kind "other".
    assert kernels["by_struct"]["params"] == [[16, 0, OTHER],
                                              [8, 16, POINTER]]
    # printf's buffer is a hidden argument the runtime fills: left out.
    prints = kernels["prints"]
    assert prints["params"] == [[8, 0, POINTER]], prints
    assert prints["kernarg_bytes"] > 8 and prints["private_bytes"] > 0
    assert table["unknown_found"] == 0


def test_hand_made_metadata_in_a_section_and_in_a_segment(
        checker: Path, tmp_path: Path) -> None:
    for segment in (False, True):
        table = show(checker, tmp_path,
                     elf(note(b"other", b"GNU\0", 1)
                         + note(metadata(kernel())), segment=segment))
        assert table["kernels"] == [{
            "name": "k", "symbol": "k.kd", "kernarg_bytes": 24,
            "max_threads": 256, "group_bytes": 128, "private_bytes": 16,
            "sgprs": 10, "vgprs": 7, "nparams": 2,
            "params": [[8, 0, POINTER], [4, 8, OTHER]], "info": 1,
            "info_nparams": 2}], segment


def test_more_parameters_than_kept_are_unknown(checker: Path,
                                               tmp_path: Path) -> None:
    args = [{".size": 4, ".offset": 4 * i, ".value_kind": "by_value"}
            for i in range(300)]
    table = show(checker, tmp_path, elf(note(metadata(
        kernel(**{".args": args, ".kernarg_segment_size": 1200})))))
    (k,) = table["kernels"]
    assert (k["nparams"], k["info"], k["info_nparams"]) == (-1, 0, -1)


DAMAGED = "its metadata is damaged (malformed MessagePack or amdhsa.kernels)"


def by_value(size: object, offset: object = 0) -> dict:
    return {".size": size, ".offset": offset, ".value_kind": "by_value"}


#: metadata the reader must refuse, by what is wrong with it
HOSTILE = {
    # Nesting deeper than the reader follows, in a key it skips.
    "deep-nesting": pack({"x": Raw(b"\x91" * 100000 + b"\x00"),
                          "amdhsa.kernels": [kernel()]}),
    # Counts and lengths beyond the bytes.
    "kernel-count-beyond-bytes":
        b"\x81" + pack("amdhsa.kernels") + b"\xdd\xff\xff\xff\xff\x80",
    "key-length-beyond-bytes": b"\x81\xdb\xff\xff\xff\xff",
    "pair-count-beyond-bytes": b"\xdf\xff\xff\xff\xff",
    "name-length-beyond-bytes": b"\x81" + pack("amdhsa.kernels")
        + b"\x91\x81" + pack(".name") + b"\xd9\x40k",
    "arg-count-beyond-bytes": pack({"amdhsa.kernels": [kernel(**{
        ".args": Raw(b"\xdc\xff\xff" + pack(by_value(8)))})]}),
    # Values of the wrong type or out of range.
    "name-not-text": metadata(kernel(**{".name": 7})),
    "name-with-nul": metadata(kernel(**{".name": "a\0b"})),
    "name-empty": metadata(kernel(**{".name": ""})),
    "name-missing": metadata(kernel(**{".name": None})),
    "symbol-missing": metadata(kernel(**{".symbol": None})),
    "size-negative": metadata(kernel(**{".args": [by_value(-4)]})),
    "size-float": metadata(kernel(**{".args": [by_value(4.0)]})),
    "size-zero": metadata(kernel(**{".args": [by_value(0)]})),
    "size-beyond-32-bits": metadata(kernel(**{
        ".args": [by_value(2 ** 64 - 1)]})),
    "kind-missing": metadata(kernel(**{
        ".args": [{".size": 4, ".offset": 0}]})),
    "args-not-a-list": metadata(kernel(**{".args": {".size": 4}})),
    "threads-beyond-range": metadata(kernel(**{
        ".max_flat_workgroup_size": 2 ** 63})),
    "registers-negative": metadata(kernel(**{".vgpr_count": -1})),
    "byte-never-used": b"\xc1",
    "root-not-a-map": pack([1, 2]),
    "target-too-long": metadata(**{"amdhsa.target": "x" * 200}),
    "empty": b"",
    # An argument beyond the arguments the kernel takes.
    "arg-beyond-kernarg": metadata(kernel(**{".kernarg_segment_size": 10})),
    "offset-beyond-kernarg": metadata(kernel(**{
        ".args": [by_value(8, 2 ** 32)]})),
}


@pytest.mark.parametrize("desc", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_metadata_is_refused(checker: Path, tmp_path: Path,
                                     desc: bytes) -> None:
    assert show(checker, tmp_path, elf(note(desc))) == {"why": DAMAGED}


def test_metadata_without_kernels_is_refused(checker: Path,
                                             tmp_path: Path) -> None:
    assert show(checker, tmp_path,
                elf(note(pack({"amdhsa.version": [1, 1]})))) == {
        "why": "its metadata lists no amdhsa.kernels"}


@pytest.mark.parametrize("image, why", [
    (elf(note(metadata(kernel()), b"AMDGPX\0")),
     "no NT_AMDGPU_METADATA note (not code object v3 or later)"),
    (elf(note(metadata(kernel()), kind=33)),
     "no NT_AMDGPU_METADATA note (not code object v3 or later)"),
    (elf(note(metadata(kernel())), machine=62),
     "an ELF image for machine 62, not an AMD GPU's (224)"),
    (b"\x7fELF\x01\x01" + b"\0" * 100,
     "not a 64-bit little-endian ELF image"),
    (b"\x7fELF", "not a 64-bit little-endian ELF image"),
])
def test_images_without_metadata_are_refused(checker: Path, tmp_path: Path,
                                             image: bytes, why: str) -> None:
    assert show(checker, tmp_path, image) == {"why": why}


def test_notes_and_headers_beyond_the_image_are_refused(
        checker: Path, tmp_path: Path) -> None:
    good = elf(note(metadata(kernel())))
    # The note's description claims more bytes than its section has.
    lying = bytearray(good)
    lying[64 + 4:64 + 8] = struct.pack("<I", 0x7fffffff)
    assert show(checker, tmp_path, bytes(lying)) == {
        "why": "no NT_AMDGPU_METADATA note (not code object v3 or later)"}
    # The section lies beyond the image.
    cut = good[:-64] + good[-64:-40] + struct.pack("<Q", 1 << 40) \
        + good[-32:]
    assert show(checker, tmp_path, cut)["why"].startswith(
        "a note lies beyond its")
    # The section headers lie beyond it.
    assert show(checker, tmp_path, good[:-1])["why"].startswith(
        "its section headers lie beyond its")


@needs_hiprtc
def test_truncated_and_corrupted_code_objects_never_read_out_of_bounds(
        checker: Path, tmp_path: Path) -> None:
    path = tmp_path / "kernels.hsaco"
    path.write_bytes(kernel_code.hsaco(kernel_code.HIP_C))
    seen = run(checker, "fuzz", str(path), "20000", "1")
    # Every prefix and corrupted copy was read or refused, none crashed;
    # the whole image and copies whose changes miss what is read are
    # read.
    assert seen["read"] > 0 and seen["refused"] > 0, seen
    assert seen["read"] + seen["refused"] == 20000 + len(
        path.read_bytes()) + 1
