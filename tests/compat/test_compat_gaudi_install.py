"""The pieces of a Gaudi install that lightning-habana, DeepSpeed and optimum-habana import (issue 35,
point 1): habana_dataloader, habana_frameworks.mediapipe, hl-smi, utils.internal, core.step_closure,
memory_cached, hpu.hpu, the bridge's ProfilerActivity, the dynamic-shape switches, and their
resolution in the Python processes a script starts."""
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import hpu_lab
from hpu_lab import config
from helpers import counts, into_closed_pipe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _hpu_lab(args, cwd, env=None):
    e = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "hpu_lab", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=300)


# ---- habana_dataloader / mediapipe

def test_habana_dataloader_falls_back_to_torch_dataloader_and_says_why(habana, capsys):
    import habana_dataloader
    from torch.utils.data import DataLoader, TensorDataset
    ds = TensorDataset(torch.arange(10.0).reshape(5, 2), torch.arange(5))
    hl = habana_dataloader.HabanaDataLoader(ds, batch_size=2, drop_last=False)
    out = capsys.readouterr().out
    assert "Failed to initialize Habana Dataloader" in out and "Running with PyTorch Dataloader" in out
    assert "TensorDataset" in hl.fallback_reason and hl.aeon is None
    got = [tuple(t.tolist() for t in b) for b in hl]
    ref = [tuple(t.tolist() for t in b) for b in DataLoader(ds, batch_size=2, drop_last=False)]
    assert got == ref and len(hl) == 3 and hl.batch_size == 2
    assert issubclass(habana_dataloader.habana_dataset.ImageFolderWithManifest, object)


def test_habana_dataloader_without_fallback_raises(habana, monkeypatch, capsys):
    import habana_dataloader
    monkeypatch.setenv("DATALOADER_FALLBACK_EN", "")       # the one value the real package reads as off
    with pytest.raises(RuntimeError, match="does not fall back"):
        habana_dataloader.HabanaDataLoader([1, 2, 3], batch_size=1)
    assert "Habana dataloader configuration failed" in capsys.readouterr().out


def test_mediapipe_imports_as_libraries_import_it_and_fails_when_used(habana):
    from habana_frameworks.mediapipe import fn
    from habana_frameworks.mediapipe.media_types import dtype, imgtype  # noqa: F401
    from habana_frameworks.mediapipe.mediapipe import MediaPipe
    from habana_frameworks.mediapipe.plugins.iterator_pytorch import HPUResnetPytorchIterator
    from hpu_lab.compat.mediapipe import MediaPipeNotEmulated

    class ResnetMediaPipe(MediaPipe):               # lightning-habana defines this at import
        def __init__(self, device):
            super().__init__(device=device)

    assert dtype.UINT8 is not None                  # looked into at class-definition time
    with pytest.raises(MediaPipeNotEmulated, match="media engine"):
        ResnetMediaPipe("hpu")
    with pytest.raises(MediaPipeNotEmulated, match="DataLoader"):
        fn.ReadImageDatasetFromDir(dir="/data")
    with pytest.raises(MediaPipeNotEmulated):
        HPUResnetPytorchIterator(mediapipe=None)


# ---- hl-smi

def _hl_smi(capsys, *args):
    from hpu_lab.tools import hl_smi
    rc = hl_smi.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_hl_smi_answers_as_a_gaudi_host(tmp_path, capsys):
    r = _hpu_lab(["hl-smi", "-v"], tmp_path)          # the command line (the venv's hl-smi is this main)
    assert r.returncode == 0
    # lightning-habana's parser (utils/resources.py)
    assert re.search(r"hl-([\d\.]+)", r.stdout).group(1) == "1.23.0"
    assert re.search(r"fw-([\d\.]+)", r.stdout)
    saved = {k: config.get(k) for k in ("HPU_LAB_HOST_CARDS", "HPU_LAB_DEVICE")}
    try:
        config.set(HPU_LAB_HOST_CARDS=4, HPU_LAB_DEVICE="gaudi3")
        rc, out, _ = _hl_smi(capsys, "-L")
        assert re.findall(r"Module ID\s+:\s+(\d+)", out) == ["0", "1", "2", "3"]   # DeepSpeed's count
        assert "HL-325L" in out and "131072 MiB" in out
    finally:
        config.set(**saved)
    rc, out, _ = _hl_smi(capsys, "-Q", "module_id,name,memory.total", "-f", "csv,noheader,nounits")
    assert out.splitlines()[:2] == ["0, HL-225, 98304", "1, HL-225, 98304"] and len(out.splitlines()) == 8
    rc, out, _ = _hl_smi(capsys)
    assert rc == 0 and out.count("HL-225") == 8 and "N/A / 98304MiB" in out
    rc, _, err = _hl_smi(capsys, "--reset-aip")
    assert rc == 2 and "not supported" in err
    rc, _, err = _hl_smi(capsys, "-Q", "frobs", "-f", "csv")
    assert rc == 2 and "unknown query field" in err



HL_SMI = os.path.join(os.path.dirname(sys.executable), "hl-smi")      # the venv's console script (pyproject)


@pytest.mark.parametrize("cmd", [[HL_SMI], [HL_SMI, "-Q", "module_id,name", "-f", "csv"],
                                 [sys.executable, "-m", "hpu_lab", "hl-smi", "-L"],
                                 [sys.executable, "-m", "hpu_lab", "config"], [sys.executable, "-m", "hpu_lab"]],
                         ids=["hl-smi", "hl-smi -Q", "python -m hpu_lab hl-smi -L", "config", "usage"])
def test_a_reader_leaving_early_ends_the_command_quietly(tmp_path, cmd):
    """`hl-smi | head -3`: no BrokenPipeError traceback; exit 141 (128 + SIGPIPE), what the shell
    reports for coreutils' `seq 1000000 | head -1`."""
    assert os.path.exists(cmd[0]), f"{cmd[0]}: the console script is not installed (make setup)"
    r = into_closed_pipe(cmd, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))
    assert (r.returncode, r.stderr) == (141, ""), r.stderr


def test_an_error_message_into_a_closed_pipe_is_quiet_too(tmp_path):
    """`hl-smi --reset-aip 2>&1 | head -0`: the refusal goes to stderr, which is the closed pipe."""
    r = into_closed_pipe([HL_SMI, "--reset-aip"], stderr_too=True, cwd=tmp_path)
    assert r.returncode == 141


def test_the_commands_still_print_everything_to_a_reader_that_stays(tmp_path):
    r = subprocess.run([HL_SMI], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("HL-225") == 8 and r.stdout.rstrip().endswith("+")

def test_children_of_a_script_resolve_habana_imports_and_find_hl_smi(tmp_path):
    (tmp_path / "child.py").write_text(textwrap.dedent("""
        import torch, habana_dataloader
        import habana_frameworks.torch.core as htcore
        x = torch.ones(2, device="hpu") * 3
        htcore.mark_step()
        print("child", htcore.__name__, x.sum().item(), habana_dataloader.HabanaDataLoader.__module__)
    """))
    (tmp_path / "parent.py").write_text(textwrap.dedent("""
        import subprocess, sys
        r = subprocess.run([sys.executable, "child.py"], capture_output=True, text=True)
        print(r.stdout, r.stderr[-2000:])
        print(subprocess.run(["hl-smi", "-v"], capture_output=True, text=True).stdout)
    """))
    r = _hpu_lab(["run", "parent.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "child hpu_lab.core 6.0 hpu_lab.compat.habana_dataloader" in r.stdout, r.stdout
    assert "Habanalabs hl-smi/hlml version hl-1.23.0" in r.stdout
    # without hpu_lab run, a plain child of the test process does not see them
    plain = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('habana_dataloader'))"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert plain.stdout.strip() == "None"


# ---- the bridge's small modules

def test_internal_is_lazy_and_step_closure(habana):
    from habana_frameworks.torch.utils.internal import is_lazy, lazy_only, Timer
    import habana_frameworks.torch.core as htcore
    assert is_lazy() == config.lazy_mode()
    calls = []

    @lazy_only
    def f():
        calls.append(1)
    f()
    assert calls == ([1] if config.lazy_mode() else [])
    with Timer() as t:
        pass
    assert t.elapsed >= 0
    x = torch.ones(4, device="hpu")
    before = counts("graph_compilation")["TotalNumber"]
    y = x * 5.0 + 1.0       # noqa: F841  (pending)
    htcore.step_closure._mark_step_if_lazy()
    after = counts("graph_compilation")["TotalNumber"]
    assert after == before + (1 if config.lazy_mode() else 0)


def test_memory_cached_and_hpu_hpu(habana):
    import habana_frameworks.torch.hpu as hthpu
    assert hthpu.hpu is hthpu is torch.hpu
    with pytest.warns(FutureWarning, match="renamed to torch.hpu.memory_reserved"):
        assert hthpu.memory_cached() == hthpu.memory_reserved()
    with pytest.warns(FutureWarning, match="max_memory_reserved"):
        assert hthpu.max_memory_cached() == hthpu.max_memory_reserved()
    assert hthpu.hpu.memory_stats()["Limit"] == hthpu.memory_reserved()


def test_dynamic_shape_switches(habana):
    import habana_frameworks.torch.core as htcore
    was = htcore.hpu.get_dynamic_shape_status()
    try:
        htcore.hpu.enable_dynamic_shape()
        assert htcore.hpu.get_dynamic_shape_status() is True
        assert config.get("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES") is True
        htcore.hpu.disable_dynamic_shape()
        assert htcore.hpu.get_dynamic_shape_status() is False
    finally:
        config.set(PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES=was)


def test_importing_habana_frameworks_torch_replaces_profiler_activity(habana, tmp_path):
    original = torch.profiler.ProfilerActivity
    import habana_frameworks.torch  # noqa: F401
    from hpu_lab.compat.activity_profiler import HabanaProfilerActivity
    PA = torch.profiler.ProfilerActivity
    assert PA is HabanaProfilerActivity and [a.name for a in PA] == ["CPU", "CUDA", "HPU"]
    # lightning-habana's HPUProfiler check: no activity is torch's C++ enum any more
    assert not isinstance(PA.HPU, torch._C._profiler.ProfilerActivity)
    x = torch.randn(8, 8, device="hpu")
    with torch.profiler.profile(activities=[PA.CPU, PA.HPU]) as prof:
        (x @ x).sum().item()
    assert prof.hpu_profiling_active
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    assert "hpu_lab emulated" in open(path).read()
    with torch.profiler.profile(activities=[original.CPU]) as prof2:      # torch's own values still work
        (x + 1).sum().item()
    assert not prof2.hpu_profiling_active
    from hpu_lab import compat
    compat.disable_habana_imports()
    assert torch.profiler.ProfilerActivity is original
    compat.enable_habana_imports()


def test_a_rank_acquires_its_visible_module_as_the_bridge_maps_it(monkeypatch):
    # lightning-habana's multi-tenancy test: a tenant given HABANA_VISIBLE_MODULES=0,1 that asks for 4
    # cards fails at its third rank with the bridge's message
    from hpu_lab.distributed.hccl import initialize_distributed_hpu
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "HLS_MODULE_ID", "HABANA_VISIBLE_MODULES", "ID", "MASTER_ADDR",
              "MASTER_PORT"):
        monkeypatch.setenv(k, "")         # recorded, so that what initialize_distributed_hpu sets is undone
        monkeypatch.delenv(k)
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "4,5")
    assert initialize_distributed_hpu(4, 1, 1) == (4, 1, 1) and os.environ["HLS_MODULE_ID"] == "5"
    monkeypatch.delenv("HLS_MODULE_ID")
    with pytest.raises(AssertionError, match="There is not enough devices"):
        initialize_distributed_hpu(4, 2, 2)
    monkeypatch.delenv("HABANA_VISIBLE_MODULES")
    assert initialize_distributed_hpu(4, 3, 3) == (4, 3, 3) and os.environ["HLS_MODULE_ID"] == "3"
