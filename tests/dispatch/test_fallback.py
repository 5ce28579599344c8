"""CPU fallback (seed 003 "Placement of Ops on HPU"; claims T2, M1)."""
import os
import subprocess
import sys

import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy
from hpu_lab.dispatch import fallback

from helpers import counts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bf16(n=6):
    return (torch.rand(n) + 0.5).to(torch.bfloat16)


def test_digamma_bf16_falls_back_and_execution_continues_on_hpu(collect):   # claim T2
    x = _bf16()
    h = x.to("hpu")
    y = torch.digamma(h * 2) + 1                     # lazy op, fallback, lazy op
    assert y.device.type == "hpu"
    fb = collect.of(ev.CPUFallback)
    assert [(e.op, e.dtypes) for e in fb] == [("aten::digamma", ("bfloat16",))]
    assert counts("cpu_fallback") == {"TotalNumber": 1, "FallbackOps": {"aten::digamma": 1}}
    syncs = [e.reason for e in collect.of(ev.HostSync)]
    assert "cpu fallback aten::digamma" in syncs      # it needed h * 2's value
    assert len(lazy.S.pg) == 1                        # "+ 1" is pending on the device again
    assert torch.equal(y.cpu(), torch.digamma(x * 2) + 1)


def test_float32_digamma_runs_on_hpu(collect):
    x = torch.rand(5) + 0.5
    y = torch.digamma(x.to("hpu"))
    assert collect.of(ev.CPUFallback) == [] and len(lazy.S.pg) == 1
    assert torch.allclose(y.cpu(), torch.digamma(x))


@pytest.mark.parametrize("fn,name", [
    (torch.lgamma, "aten::lgamma"),
    (lambda t: torch.polygamma(1, t), "aten::polygamma"),
    (lambda t: t.clone().digamma_(), "aten::digamma_"),
])
def test_gamma_family_in_bf16_falls_back(fn, name, collect):
    x = _bf16()
    y = fn(x.to("hpu"))
    assert [e.op for e in collect.of(ev.CPUFallback)] == [name]
    assert torch.equal(y.cpu(), fn(x))


def test_op_with_no_meta_kernel_falls_back(collect):
    # hpu_lab's "not registered for HPU": an op its graph compiler cannot put in a graph
    a = torch.randn(4, 3)
    qa, tau = torch.geqrf(a.to("hpu"))
    ra, rtau = torch.geqrf(a)
    assert qa.device.type == "hpu"
    assert [e.op for e in collect.of(ev.CPUFallback)] == ["aten::geqrf"]
    assert torch.equal(qa.cpu(), ra) and torch.equal(tau.cpu(), rtau)


def test_data_dependent_ops_are_not_fallbacks(collect):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0]).to("hpu")
    assert x.nonzero().cpu().flatten().tolist() == [1, 3]
    assert collect.of(ev.CPUFallback) == []


def test_place_on_cpu_none_forbids_fallback_with_a_clear_error():
    config.set(PT_HPU_PLACE_ON_CPU="none")
    h = _bf16().to("hpu")
    with pytest.raises(fallback.FallbackNotAllowed,
                       match=r"aten::digamma is not yet supported on HPU\. \(torch.bfloat16 is not supported"):
        torch.digamma(h)
    assert counts("cpu_fallback")["TotalNumber"] == 0
    assert (h.float() * 2).cpu().shape == (6,)        # the runtime goes on


def test_place_on_cpu_list_places_those_ops_on_cpu_only(collect):
    config.set(PT_HPU_PLACE_ON_CPU="aten::add,digamma")
    x = torch.randn(4)
    y = x.to("hpu") + 1                               # supported, but placed on the CPU
    assert [e.op for e in collect.of(ev.CPUFallback)] == ["aten::add"]
    assert torch.equal(y.cpu(), x + 1)
    z = torch.digamma(_bf16().to("hpu"))              # listed: may fall back
    assert z.device.type == "hpu"
    config.set(PT_HPU_PLACE_ON_CPU="aten::add")
    with pytest.raises(fallback.FallbackNotAllowed, match="aten::digamma is not yet supported on HPU"):
        torch.digamma(_bf16().to("hpu"))
    config.set(PT_HPU_PLACE_ON_CPU="")
    y2 = x.to("hpu") + 1
    assert len(collect.of(ev.CPUFallback)) == 2 and torch.equal(y2.cpu(), x + 1)


def test_fallback_in_eager_mode():
    config.set(PT_HPU_LAZY_MODE="0")
    x = _bf16()
    y = torch.lgamma(x.to("hpu")) * 3
    assert counts("cpu_fallback")["TotalNumber"] == 1
    assert torch.equal(y.cpu(), torch.lgamma(x) * 3)


def test_fallback_during_hpu_graph_capture_is_refused():
    graphs = pytest.importorskip("hpu_lab.graphs")
    h = _bf16().to("hpu")
    htcore.mark_step()
    g = graphs.HPUGraph()
    with pytest.raises(Exception, match="cpu fallback is not supported during hpu graph capturing"):
        with graphs.graph(g):
            torch.digamma(h * 2)
    assert lazy.S.capture is None
    assert counts("cpu_fallback")["TotalNumber"] == 0
    assert torch.equal(torch.digamma(h).cpu(), torch.digamma(h.cpu()))   # usable afterwards


def test_console_log_lines_and_exit_frequency_table():
    code = ("import torch, hpu_lab\n"
            "x = (torch.rand(4) + 0.5).to(torch.bfloat16).to('hpu')\n"
            "torch.digamma(x).cpu(); torch.digamma(x).cpu(); torch.lgamma(x).cpu()\n")
    env = dict(os.environ, ENABLE_CONSOLE="true", LOG_LEVEL_PT_FALLBACK="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["CPU fallback digamma : self=HPUBFloat16Type"] * 2 + \
        ["CPU fallback lgamma : self=HPUBFloat16Type"]
    assert lines[3:] == ["Frequency of op and op name that were executed on CPU:",
                         "2\taten::digamma", "1\taten::lgamma"]


def test_no_console_output_without_the_log_settings():
    code = ("import torch, hpu_lab\n"
            "torch.digamma((torch.rand(4) + 0.5).to(torch.bfloat16).to('hpu')).cpu()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ENABLE_CONSOLE", "LOG_LEVEL_PT_FALLBACK")}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("lazy_mode", ["1", "0"])
@pytest.mark.parametrize("part, whole", [(torch.float32, torch.complex64), (torch.float64, torch.complex128)])
def test_torch_complex_of_hpu_tensors_is_a_cpu_tensor_as_on_the_bridge(part, whole, lazy_mode, collect):
    """Intel's test_complex (tests/pytest_working/lazy): the bridge's kernel for torch.complex returns
    a CPU tensor (Gaudi has no complex dtypes), and what follows runs on the CPU. hpu_lab kept it on
    hpu. Not a CPU fallback: no fallback event, count or log line, as the bridge's is an override."""
    config.set(PT_HPU_LAZY_MODE=lazy_mode)
    real, imag = torch.tensor([1, 2], dtype=part), torch.tensor([3, 4], dtype=part)
    z = 2 * torch.complex(real, imag) + 1.0
    z_h = 2 * torch.complex(real.to("hpu") * 1, imag.to("hpu")) + 1.0
    assert str(z_h.device) == "cpu" and z_h.dtype == whole
    assert torch.equal(z_h, z)
    assert collect.of(ev.CPUFallback) == []
    assert "torch.complex: complex values live on the CPU" in [e.reason for e in collect.of(ev.HostSync)]
