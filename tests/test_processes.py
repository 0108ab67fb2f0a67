"""Many processes: NVML counting without cuInit, CUDA_VISIBLE_DEVICES,
ACCELERATOR_VISIBLE_DEVICES, local_device_index() and real launchers.

Each configuration runs in a fresh interpreter (drivers initialise once
per process) on the CUDA double, with the NVML double beside it (the
default: the backend pairs a CUDA library given by path with the NVML in
the same folder), or without it (ACCELERATOR_NVML_LIBRARY=none), and in
every configuration of fake_drivers.configurations() where the point is
backend-neutral.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import fake_drivers
from fake_drivers import CUDA_DOUBLE, NVML_DOUBLE, REPO

pytestmark = pytest.mark.skipif(
    not (CUDA_DOUBLE.exists() and NVML_DOUBLE.exists()),
    reason="run make -C tests/drivers first")

PRELUDE = """
import json, os, sys
sys.path.insert(0, {tests!r})
import fake_drivers
"""

CUDA = {"ACCELERATOR_BACKEND": "cuda",
        "ACCELERATOR_CUDA_LIBRARY": str(CUDA_DOUBLE)}
WITHOUT_NVML = {**CUDA, **fake_drivers.CudaDouble.eager_probe_env}


def environment(**env: str) -> dict[str, str]:
    result = fake_drivers.clean_environment()
    result.update(env)
    result["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), result.get("PYTHONPATH")]))
    return result


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    """code in a fresh interpreter with only this configuration; its last
    stdout line is returned parsed when it is JSON."""
    script = PRELUDE.format(tests=str(REPO / "tests")) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script],
                            env=environment(**env), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def last_json(result: subprocess.CompletedProcess):
    return json.loads(result.stdout.splitlines()[-1])


# NVML: questions without cuInit -------------------------------------------

QUESTIONS = """
cuda = fake_drivers.CudaDouble()
nvml = fake_drivers.NvmlDouble()
import accelerator as a
from accelerator import _report
answers = [a.is_available(), a.device_count(), str(a.current_accelerator()),
           a.current_device_index()]
a.synchronize()
a.empty_cache()
report = _report.collect_report(init=False)
print(json.dumps(dict(
    answers=answers, cuInit=cuda.calls("cuInit"),
    cuda_calls=cuda.calls() - cuda.calls("cuGetProcAddress")
    - cuda.calls("cuDriverGetVersion") - cuda.calls("cuDeviceGetCount"),
    asked=cuda.calls("cuDeviceGetCount"),
    nvml_calls=nvml.calls(), nvml_open=nvml.live("init"),
    counted_by=report["backends"][0]["counted_by"],
    initialized=report["backends"][0]["initialized"],
    devices=[[d["read"], d["error"]] for d in report["devices"]])))
"""


def test_questions_answer_through_nvml_without_cuinit() -> None:
    got = last_json(run(QUESTIONS, **CUDA, FAKE_CUDA_DEVICES="3"))
    assert got["answers"] == [True, 3, "cuda", 0]
    assert got["cuInit"] == 0
    # Only the calls that need no initialisation: entry points, version,
    # and synchronize() asking whether another library initialised CUDA
    # (cuDeviceGetCount answers NOT_INITIALIZED and initialises nothing).
    assert got["cuda_calls"] == 0
    assert got["asked"] == 1
    assert got["nvml_calls"] >= 3 and got["nvml_open"] == 0  # shut down
    assert got["counted_by"] == (f"NVML ({NVML_DOUBLE}), without "
                                 "initialising CUDA")
    assert got["initialized"] is False
    assert len(got["devices"]) == 3
    # Listed unread, which is no error.
    assert got["devices"] == [[False, None]] * 3


def test_without_nvml_the_questions_run_cuinit() -> None:
    got = last_json(run(QUESTIONS, **WITHOUT_NVML, FAKE_CUDA_DEVICES="3"))
    assert got["answers"] == [True, 3, "cuda", 0]
    assert got["cuInit"] == 1 and got["nvml_calls"] == 0
    assert got["cuda_calls"] > 0
    assert got["counted_by"] == ("cuInit (NVML not used: "
                                 "ACCELERATOR_NVML_LIBRARY=none)")
    assert got["initialized"] is True
    assert got["devices"] == [[True, None]] * 3


def test_report_no_init_leaves_cuda_uninitialised() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accelerator", "--no-init", "--json"],
        env=environment(**CUDA), capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    cuda = report["backends"][0]
    assert report["device_count"] == 2 and cuda["initialized"] is False
    assert cuda["counted_by"].startswith("NVML (")
    assert [d["name"] for d in report["devices"]] == [None, None]
    text = subprocess.run(
        [sys.executable, "-m", "accelerator", "--no-init"],
        env=environment(**CUDA), capture_output=True, text=True,
        timeout=120).stdout
    assert "counted by: NVML (" in text and "driver: not initialised" in text
    assert "not read: --no-init leaves the driver uninitialised" in text
    assert "error" not in text


def test_nvml_library_override_and_a_missing_one() -> None:
    code = """
    import accelerator as a
    print(json.dumps([a.device_count(), a.backends()[0]["counted_by"]]))
    """
    count, how = last_json(run(
        code, ACCELERATOR_BACKEND="cuda",
        ACCELERATOR_CUDA_LIBRARY=str(CUDA_DOUBLE),
        ACCELERATOR_NVML_LIBRARY=str(NVML_DOUBLE)))
    assert count == 2 and how.startswith(f"NVML ({NVML_DOUBLE})")
    count, how = last_json(run(code, **CUDA,
                               ACCELERATOR_NVML_LIBRARY="/nonexistent/nvml"))
    assert count == 2
    assert how == "cuInit (NVML not used: cannot open /nonexistent/nvml)"
    # A library that is not NVML (the CUDA double itself).
    count, how = last_json(run(code, **CUDA,
                               ACCELERATOR_NVML_LIBRARY=str(CUDA_DOUBLE)))
    assert count == 2
    assert how == f"cuInit (NVML not used: {CUDA_DOUBLE} lacks nvmlInit_v2)"


def test_first_use_initialises_once_and_the_count_follows_cuda() -> None:
    """NVML sees a device CUDA does not: the count before the first use is
    NVML's, after it CUDA's (the driver is the authority)."""
    got = last_json(run("""
    cuda = fake_drivers.CudaDouble()
    import accelerator as a
    before = a.device_count()
    a.Stream(0).synchronize()
    a.Stream(1).synchronize()
    info = a.backends()[0]
    print(json.dumps([before, a.device_count(), cuda.calls("cuInit"),
                      info["initialized"]]))
    """, **CUDA, FAKE_CUDA_DEVICES="2", FAKE_NVML_DEVICES="3"))
    assert got == [3, 2, 1, True]


@pytest.mark.parametrize("first_use", [
    "a.set_device_index(1)",
    "a.current_stream().synchronize()",
    "a.current_stream(1).query()",
    "a.Stream(1).synchronize()",
    "a.Event().record()",
    "a.get_device_properties(1)",
    "a.get_memory_info(1)",
    "a.Buffer(64, device=1).fill(7)",
    "a.HostBuffer(64)",
    "a.Stream.from_handle(0)",
    "a.device_index(1).__enter__()",
])
def test_any_first_use_initialises_the_driver(first_use: str) -> None:
    """Whichever call comes first initialises CUDA once, and works."""
    got = last_json(run(f"""
    cuda = fake_drivers.CudaDouble()
    import accelerator as a
    assert a.device_count() == 2 and cuda.calls("cuInit") == 0
    {first_use}
    a.synchronize(1)
    print(json.dumps([cuda.calls("cuInit"), a.backends()[0]["initialized"]]))
    """, **CUDA))
    assert got == [1, True]


# CUDA_VISIBLE_DEVICES, as CUDA parses it ----------------------------------

UUID = "GPU-fa4ecda0-0000-4000-8000-00000000000{}"


@pytest.mark.parametrize("visible, physical", [
    ("2,0", [2, 0]),
    ("1", [1]),
    (" 2 , 1", [2, 1]),
    ("1gpu,0", [1, 0]),          # strtoul: leading digits
    ("0,5,1", [0]),              # beyond the count: the list ends
    ("1,x,0", [1]),              # unreadable: the list ends
    ("1,-1,0", [1]),             # negative: the list ends
    ("0,1,0", []),               # a repeat empties the list
    ("", []),
    (UUID.format(2), [2]),
    (f"{UUID.format(1)},{UUID.format(0)}", [1, 0]),
    ("GPU-fa4ecda0-0000-4000-8000-000000000002,0", [2]),  # kinds differ
    ("GPU-fa4e", []),            # an ambiguous prefix ends the list
    ("GPU-ffff", []),            # an unknown one too
])
def test_cuda_visible_devices_match_what_cuda_sees(
        visible: str, physical: list[int]) -> None:
    """The count NVML answers before cuInit is the count CUDA has after
    it, and device i is the physical device CUDA says (its UUID)."""
    got = last_json(run("""
    cuda = fake_drivers.CudaDouble()
    import accelerator as a
    nvml_count = a.device_count()
    uuids = []
    if a.is_available():
        uuids = [a.get_device_properties(i).uuid
                 for i in range(a.device_count())]
    print(json.dumps([nvml_count, a.device_count(), uuids,
                      cuda.calls("cuInit")]))
    """, **CUDA, FAKE_CUDA_DEVICES="3", CUDA_VISIBLE_DEVICES=visible))
    nvml_count, count, uuids, inits = got
    assert nvml_count == count == len(physical)
    assert [u[-1] for u in uuids] == [str(p) for p in physical]
    # No visible device: unavailable without ever initialising CUDA.
    assert inits == (1 if physical else 0)


def test_mig_devices_are_left_to_cuinit() -> None:
    got = last_json(run("""
    import accelerator as a
    print(json.dumps(a.backends()[0]))
    """, **CUDA, CUDA_VISIBLE_DEVICES="MIG-1234"))
    assert got["counted_by"] == ("cuInit (NVML not used: "
                                 "CUDA_VISIBLE_DEVICES names MIG devices)")


# ACCELERATOR_VISIBLE_DEVICES ----------------------------------------------

VISIBLE = """
import accelerator as a
from accelerator import _report
out = dict(available=a.is_available(), count=a.device_count(),
           visible=a._accelerator._visible_devices())
if a.is_available():
    out["uuids"] = [a.get_device_properties(i).uuid[-1]
                    for i in range(a.device_count())]
    out["names"] = [a.get_device_name(i) for i in range(a.device_count())]
    s = a.Stream(a.device_count() - 1)
    s.record_event().synchronize()
else:
    try:
        a.Stream()
    except a.AcceleratorError as exc:
        out["error"] = str(exc)
report = _report.collect_report()
out["report_visible"] = report["visible_devices"]
out["reasons"] = [b["reason"] for b in report["backends"]]
out["text"] = _report.format_text(report)
print(json.dumps(out))
"""

#: configuration -> the double underneath (each backend's, and where the
#: probe can count without initialising the driver, the configuration
#: where it initialises it: CUDA without NVML, HIP without the KFD
#: topology)
CONFIGS = fake_drivers.configurations()


def config_params() -> list:
    return fake_drivers.params(CONFIGS)


def config_env(config: str) -> dict[str, str]:
    """The configuration's environment with three devices."""
    return CONFIGS[config].configuration(config, 3)


@pytest.mark.parametrize("config", config_params())
def test_visible_devices_restrict_and_reorder(config: str) -> None:
    got = last_json(run(VISIBLE, **config_env(config),
                        ACCELERATOR_VISIBLE_DEVICES="2,0"))
    assert got["available"] and got["count"] == 2
    assert got["visible"] == got["report_visible"] == [2, 0]
    if CONFIGS[config].index_in_names:
        assert [name[-1] for name in got["names"]] == ["2", "0"]
        assert got["uuids"] == ["2", "0"]
    assert "ACCELERATOR_VISIBLE_DEVICES: devices 2, 0" in got["text"]


@pytest.mark.parametrize("value, needle", [
    ("3", "ACCELERATOR_VISIBLE_DEVICES='3' names device 3, but the {} "
          "backend has 3 devices (indices 0 to 2)"),
    ("0,x", "ACCELERATOR_VISIBLE_DEVICES='0,x': 'x' is not a device index "
            "(expected a comma-separated list of distinct device indices, "
            "e.g. 2,0)"),
    ("1,1", "ACCELERATOR_VISIBLE_DEVICES='1,1' names device 1 twice"),
    ("-1", "ACCELERATOR_VISIBLE_DEVICES='-1': '-1' is not a device index"),
    ("0,,1", "ACCELERATOR_VISIBLE_DEVICES='0,,1': '' is not a device index"),
    ("", "ACCELERATOR_VISIBLE_DEVICES is empty: no device is visible"),
    (",".join(map(str, range(65))), "names more than 64 devices"),
])
@pytest.mark.parametrize("config", config_params())
def test_bad_visible_devices_fail_clearly(config: str, value: str,
                                          needle: str) -> None:
    """At the first use (the error lists the reason) and in the report."""
    got = last_json(run(VISIBLE, **config_env(config),
                        ACCELERATOR_VISIBLE_DEVICES=value))
    needle = needle.format(CONFIGS[config].device_type)
    assert not got["available"] and got["count"] == 0, got
    assert needle in got["error"], got["error"]
    assert "none is available" in got["error"]
    assert any(reason and needle in reason for reason in got["reasons"])
    assert needle in got["text"]


def test_visible_devices_beyond_what_cuda_finds_at_first_use() -> None:
    """NVML counted 3, CUDA has 2: the list is refused at the first use."""
    got = last_json(run("""
    import accelerator as a
    before = [a.is_available(), a.device_count()]
    try:
        a.Stream()
    except a.AcceleratorError as exc:
        error = str(exc)
    print(json.dumps([before, error, a.backends()[0]["reason"]]))
    """, **CUDA, FAKE_CUDA_DEVICES="2", FAKE_NVML_DEVICES="3",
        ACCELERATOR_VISIBLE_DEVICES="2"))
    before, error, reason = got
    assert before == [True, 1]
    assert ("ACCELERATOR_VISIBLE_DEVICES='2' names device 2, but the "
            "initialised cuda driver has 2 devices") in error
    assert reason.startswith("initialisation at first use failed: ")


# local_device_index() -----------------------------------------------------

LOCAL = """
import accelerator as a
try:
    print(json.dumps(a.local_device_index()))
except (ValueError, a.AcceleratorError) as exc:
    print(json.dumps(type(exc).__name__ + ": " + str(exc)))
"""


@pytest.mark.parametrize("env, expected", [
    ({}, 0),                                            # the current device
    ({"LOCAL_RANK": "1"}, 1),
    ({"LOCAL_RANK": "5"}, 2),                           # modulo 3 devices
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, 2),
    ({"MPI_LOCALRANKID": "4"}, 1),
    ({"SLURM_LOCALID": "1"}, 1),
    ({"LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "MPI_LOCALRANKID": "0", "SLURM_LOCALID": "1"}, 2),  # torchrun first
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_LOCALID": "0"}, 1),
    ({"MPI_LOCALRANKID": " 2 "}, 2),
    ({"LOCAL_RANK": "one"},
     "ValueError: LOCAL_RANK='one' is not a local rank: expected a "
     "non-negative integer"),
    ({"SLURM_LOCALID": "-1"},
     "ValueError: SLURM_LOCALID='-1' is not a local rank"),
    ({"LOCAL_RANK": ""}, "ValueError: LOCAL_RANK='' is not a local rank"),
])
def test_local_device_index(env: dict[str, str], expected: object) -> None:
    got = last_json(run(LOCAL, **CUDA, FAKE_CUDA_DEVICES="3", **env))
    if isinstance(expected, str):
        assert got.startswith(expected), got
    else:
        assert got == expected


def test_local_device_index_without_an_accelerator() -> None:
    got = last_json(run(LOCAL, **CUDA, FAKE_CUDA_DEVICES="0",
                        LOCAL_RANK="1"))
    assert got.startswith("AcceleratorError: Cannot access accelerator "
                          "device when none is available."), got


def test_local_device_index_asks_only_questions() -> None:
    got = last_json(run("""
    cuda = fake_drivers.CudaDouble()
    import accelerator as a
    print(json.dumps([a.local_device_index(), cuda.calls("cuInit")]))
    """, **CUDA, LOCAL_RANK="1"))
    assert got == [1, 0]


# A real launcher ------------------------------------------------------------

RANK = """
import json, os, sys
sys.path.insert(0, {tests!r})
import fake_drivers
cuda = fake_drivers.CudaDouble()
import accelerator as a
index = a.local_device_index()
a.set_device_index(index)
stream = a.Stream()
stream.record_event().synchronize()
a.synchronize()
with open(os.path.join({out!r}, "rank" + os.environ["OMPI_COMM_WORLD_RANK"]),
          "w") as f:
    json.dump(dict(local_rank=os.environ["OMPI_COMM_WORLD_LOCAL_RANK"],
                   index=index, current=a.current_device_index(),
                   stream_device=stream.device_index,
                   driver_device=cuda.current_device(),
                   uuid=a.get_device_properties(index).uuid), f)
"""


@pytest.mark.skipif(shutil.which("mpirun") is None,
                    reason="no mpirun (apt-get install openmpi-bin; "
                           "tests/run.sh does)")
def test_mpirun_ranks_take_their_own_devices(tmp_path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK.format(tests=str(REPO / "tests"),
                                  out=str(tmp_path)))
    env = environment(**CUDA, FAKE_CUDA_DEVICES="2",
                      OMPI_MCA_rmaps_base_oversubscribe="1")
    result = subprocess.run(
        ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2",
         sys.executable, str(script)],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}").read_text())
             for r in range(2)]
    for rank, seen in enumerate(ranks):
        assert seen["local_rank"] == str(rank)
        assert seen["index"] == seen["current"] == rank
        assert seen["stream_device"] == seen["driver_device"] == rank
        assert seen["uuid"].endswith(str(rank))
