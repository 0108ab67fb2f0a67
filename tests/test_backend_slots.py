"""The registration check of a backend's slots (csrc/core/backend_check.c).

The dispatcher refuses, when it registers a backend, one with a required
slot left NULL or an optional group filled in part: the five graph slots,
the four device memory slots, the two page-locked host memory slots, the
two foreign memory slots (pointer_info, pointer_range), the five kernel
slots, the five interprocess slots (all or none each, backend.h), kernels
without the formats they load (code_formats) or formats without kernels,
and interprocess slots without device memory.  No backend of this build
is incomplete, so the check is run here on descriptors with slots left
out: a small C program (tests/drivers/check_backend_slots.c) compiled with
the very file the extension links.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from fake_drivers import REPO

GROUPS = {
    "graph": ("graph_capture_begin", "graph_capture_end",
              "graph_instantiate", "graph_launch", "graph_destroy"),
    "device memory": ("mem_alloc", "mem_free", "mem_copy", "mem_fill"),
    "page-locked host memory": ("host_alloc", "host_free"),
    "foreign memory": ("pointer_info", "pointer_range"),
    "kernel": ("module_load", "module_unload", "kernel_get",
               "kernel_release", "launch"),
    "interprocess": ("ipc_mem_export", "ipc_mem_open", "ipc_mem_close",
                     "ipc_event_export", "ipc_event_open"),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Case -> what the check says (its reason, or 'complete')."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler"
    program = tmp_path_factory.mktemp("slots") / "check_backend_slots"
    build = subprocess.run(
        [compiler, "-std=gnu11", "-Wall", "-Wextra", "-Werror",
         f"-I{REPO / 'csrc' / 'include'}", str(REPO / "tests/drivers/check_backend_slots.c"),
         str(REPO / "csrc/core/backend_check.c"), "-o", str(program)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(program)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return dict(line.split("\t", 1) for line in run.stdout.splitlines())


def test_complete_descriptors_and_whole_groups_pass(verdicts) -> None:
    assert verdicts["complete"] == "complete"
    for case in ("without graphs", "without device memory",
                 "without host memory", "without foreign memory",
                 "without interprocess"):
        assert verdicts[case] == "complete", case


def test_a_missing_required_slot_is_named(verdicts) -> None:
    for slot in ("probe", "processor_label", "event_synchronize"):
        assert verdicts[f"without {slot}"] == \
            f"its required slot {slot} is NULL"


@pytest.mark.parametrize("group", list(GROUPS))
def test_a_group_filled_in_part_is_refused(verdicts, group: str) -> None:
    for slot in GROUPS[group]:
        why = verdicts[f"without {slot}"]
        assert why.startswith(f"its {group} slots are filled in part: "
                              f"{slot} is NULL"), (slot, why)
        assert "all or none" in why, why


def test_a_lone_slot_of_a_group_is_refused(verdicts) -> None:
    why = verdicts["only mem_fill"]
    assert why.startswith("its device memory slots are filled in part: "
                          "mem_alloc is NULL"), why


def test_interprocess_slots_need_device_memory(verdicts) -> None:
    assert verdicts["interprocess without device memory"] == \
        "it has interprocess slots but no device memory"


def test_kernels_and_their_formats_come_together(verdicts) -> None:
    assert verdicts["without kernels"] == "complete"
    assert verdicts["kernels without code_formats"] == \
        "it has kernels but no code_formats"
    assert verdicts["code_formats without kernels"] == \
        "it has code_formats but no kernels"


def test_compilers_come_whole_with_their_formats_and_kernels(
        verdicts) -> None:
    assert verdicts["without compilers"] == "complete"
    assert verdicts["without compile"] == (
        "its compiler slots are filled in part: compile is NULL while "
        "compiler_open is set (all or none)")
    assert verdicts["compilers without source_formats"] == \
        "it has compiler slots but no source_formats"
    assert verdicts["source_formats without compilers"] == \
        "it has source_formats but no compiler slots"
    assert verdicts["compilers without kernels"] == \
        "it has compiler slots but no kernels"
