"""The Gaudi clock (hpu_lab.perfmodel): cards, the cost model, retime() and estimate().

Every assertion is on the model (deterministic) or on counts; none on wall time.
"""
import subprocess
import sys
import threading
import time

import pytest
import torch

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy, perfmodel as pm
from hpu_lab.perfmodel import cost
from hpu_lab.runtime import executor

from helpers import ONE_US, hand_made, no_cyclic_gc, recorded as record, seed_setup

HPU = torch.device("hpu")


# ------------------------------------------------------------------ cards and configuration

def test_cards_and_device_name():
    assert set(pm.DEVICES) == {"gaudi", "gaudi2", "gaudi3"}
    assert pm.card().name == "gaudi2" and torch.hpu.get_device_name() == "GAUDI2"
    for name, want in (("gaudi", "GAUDI"), ("gaudi3", "GAUDI3"), ("gaudi2", "GAUDI2")):
        config.set(HPU_LAB_DEVICE=name)
        assert torch.hpu.get_device_name() == want and pm.card().name == name
    with pytest.raises(config.ConfigError, match="HPU_LAB_DEVICE"):
        config.set(HPU_LAB_DEVICE="h100")
    with pytest.raises(ValueError, match="unknown device"):
        pm.card("tpu")
    g1, g2, g3 = (pm.DEVICES[n] for n in ("gaudi", "gaudi2", "gaudi3"))
    # Gaudi 3 at its shipped MME clock: 8 MMEs x 256x256 MACs x 2 FLOPs x 1.6 GHz [MLE], not the 1835
    # TFLOPS of 1.75 GHz [HC24]; FP32 is the white paper's 229 TFLOPS at that clock, 1/8 of BF16 [G3WP]
    assert g2.mme_rate("bfloat16") == 432e12 and g3.mme_rate("bfloat16") == 1677e12
    assert abs(g3.mme_rate("bfloat16") - 8 * 256 * 256 * 2 * 1.6e9) < 0.001 * g3.mme_rate("bfloat16")
    assert abs(g3.mme_rate("float32") * 8 - g3.mme_rate("bfloat16")) < 0.01 * g3.mme_rate("bfloat16")
    # its best GEMM reaches 74.1% of peak where Gaudi 2's reaches 96.9% [MLE]; the others as calibrated
    assert g3.mme_derate == 0.765 and g2.mme_derate == g1.mme_derate == 1.0
    # FP8 matrix peaks [HC24]: twice bf16 on Gaudi 2, equal to it on Gaudi 3; first-gen has no FP8
    assert g2.mme_rate("float8_e4m3fn") == g2.mme_rate("float8_e5m2") == 865e12
    assert g3.mme_rate("float8_e4m3fn") == 1677e12 and (g2.fp8, g3.fp8, g1.fp8) == (True, True, False)
    with pytest.raises(RuntimeError, match="FP8 data type is not available on this device"):
        g1.mme_rate("float8_e4m3fn")
    assert (g1.hbm_bw, g2.hbm_bw, g3.hbm_bw) == (0.9e12, 2.46e12, 3.67e12)
    # 28.7 TFLOPS [HC24] at the TPC clock it ships with, 1.6 GHz instead of 1.75 [MLE]
    assert abs(g3.vector_rate("bfloat16") - 28.7e12 * 1600 / 1750) < 1e6 and (g2.tpc_units, g3.tpc_units, g3.mme_units) == (24, 64, 8)


# ------------------------------------------------------------------ roofline facts (estimate: nothing runs)

def _matmul(n, dtype):
    a = torch.empty(n, n, dtype=dtype, device=HPU)
    b = torch.empty(n, n, dtype=dtype, device=HPU)
    return lambda: a @ b


def test_big_bf16_matmul_costs_its_flops_at_peak():
    ns = pm.estimate(_matmul(4096, torch.bfloat16), device="gaudi2").device_ns
    ideal = 2 * 4096 ** 3 / 432e12 * 1e9
    assert ideal < ns < ideal / cost.EFFICIENCY["mme"] * 1.05 + 100_000


def _scaled_mm(m, n, k, out_dtype=torch.bfloat16, bias=False):
    a = torch.empty(m, k, device=HPU).to(torch.float8_e4m3fn)
    b = torch.empty(n, k, device=HPU).to(torch.float8_e4m3fn)
    one = torch.ones((), device=HPU)
    c = torch.empty(n, device=HPU).to(torch.bfloat16) if bias else None
    htcore.mark_step()
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, scale_result=one, bias=c,
                                    out_dtype=out_dtype)


def _bf16_mm(m, n, k):
    a = torch.empty(m, k, dtype=torch.bfloat16, device=HPU)
    b = torch.empty(k, n, dtype=torch.bfloat16, device=HPU)
    return lambda: a @ b


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn])
def test_fp8_gemm_is_one_mme_kernel_at_the_fp8_rate(out_dtype):
    # hpu's _scaled_mm is fp8 operands cast to float32, a float32 mm, the scales, the bias and a cast
    # (kernels/scaled_mm.py); the bridge lowers aten::_scaled_mm to one fp8_gemm node that takes the scales
    # and the bias and writes out_dtype: one MME kernel at the FP8 rate (Gaudi 2: 865 TFLOPS) moving
    # the fp8 operands and the output in out_dtype, and no TPC kernel
    n = 4096
    g2 = pm.card("gaudi2")
    rep = pm.estimate(_scaled_mm(n, n, n, out_dtype, bias=True), device="gaudi2")
    ks = [k for summary, _ in rep.recipes for k in cost.kernels(summary, g2)]
    assert [k.engine for k in ks] == ["MME"]
    out_size = torch.empty((), dtype=out_dtype).element_size()
    assert ks[0].hbm_bytes == 2 * n * n * 1 + n * n * out_size + n * 2 + 3 * 4   # + bf16 bias, 3 scales
    fp8_ideal = 2 * n ** 3 / (865e12 * cost.EFFICIENCY["mme"]) * 1e9
    assert fp8_ideal < ks[0].ns < fp8_ideal * 1.02 + g2.kernel_ns
    assert rep.device_ns == ks[0].ns + g2.recipe_launch_ns


def test_fp8_gemm_is_cheaper_than_bf16_where_the_card_says_so():
    # Gaudi 2: FP8 peak is twice BF16's, so a large GEMM costs about half. Gaudi 3: FP8 and BF16
    # peaks are equal [HC24], so a FLOP-bound GEMM costs the same and FP8 wins where bytes dominate
    # (a thin, decode-like GEMM: the weights are half the bytes)
    big, thin = (4096, 4096, 4096), (16, 8192, 8192)
    for dev in ("gaudi2", "gaudi3"):
        fp8 = {s: pm.estimate(_scaled_mm(*s), device=dev).device_ns for s in (big, thin)}
        bf16 = {s: pm.estimate(_bf16_mm(*s), device=dev).device_ns for s in (big, thin)}
        assert fp8[thin] < 0.7 * bf16[thin], dev
        assert fp8[big] <= bf16[big], dev
    assert pm.estimate(_scaled_mm(*big), device="gaudi2").device_ns < 0.6 * pm.estimate(_bf16_mm(*big), device="gaudi2").device_ns


def test_first_gen_gaudi_has_no_fp8_gemm():
    # Intel's bridge: device_supports_fp8() is Gaudi 2 / Gaudi 3 only; its FP8 ops check it and
    # fail with "FP8 data type is not available on this device." The Gaudi clock cannot cost an FP8
    # GEMM on first-gen Gaudi, and the emulated first-gen device refuses to run one
    f = _scaled_mm(256, 256, 256)
    with pytest.raises(RuntimeError, match="FP8 data type is not available on this device"):
        pm.estimate(f, device="gaudi")
    config.set(HPU_LAB_DEVICE="gaudi")
    with pytest.raises(RuntimeError, match="FP8 data type is not available on this device"):
        f()
    config.set(HPU_LAB_DEVICE="gaudi2")
    assert f().shape == (256, 256)


def test_the_mme_converts_its_operands_on_load_and_its_output_on_store():
    # autocast's casts beside a matmul: an fp32 weight cast to bf16 that only the MME reads, and a
    # bf16 product cast to float32 (through a view) are the MME's load / store conversion
    # (FUSE_CONVERT_MME): no TPC kernel, and the MME moves the weight as stored (4 bytes an element)
    # and writes the float32 result
    m, k, n = 2048, 1024, 4096
    x = torch.empty(m, k, dtype=torch.bfloat16, device=HPU)
    w = torch.empty(n, k, device=HPU)

    def f():
        with torch.autocast("hpu", dtype=torch.bfloat16):
            y = torch.nn.functional.linear(x, w)
        return y.view(m, n // 2, 2).float()
    (summary, c), = pm.estimate(f, device="gaudi2").recipes
    ks = cost.kernels(summary, pm.card("gaudi2"))
    assert [k.engine for k in ks] == ["MME"]
    assert ks[0].hbm_bytes == m * k * 2 + n * k * 4 + m * n * 4
    # between two products the cast is the first one's store: the second reads what it wrote
    a, b = torch.empty(k, k, dtype=torch.bfloat16, device=HPU), torch.empty(k, k, device=HPU)
    (summary, c), = pm.estimate(lambda: (a @ a).float() @ b, device="gaudi2").recipes
    first, second = cost.kernels(summary, pm.card("gaudi2"))
    assert (first.hbm_bytes, second.hbm_bytes) == (k * k * (2 + 4), k * k * (4 + 4 + 4))


def test_faster_card_and_bf16_are_cheaper():
    f = _matmul(2048, torch.bfloat16)
    g1, g2, g3 = (pm.estimate(f, device=d).device_ns for d in ("gaudi", "gaudi2", "gaudi3"))
    assert g3 < g2 < g1
    assert pm.estimate(f).device_ns < pm.estimate(_matmul(2048, torch.float32)).device_ns


def test_fusion_moves_only_boundary_tensors():
    x = torch.empty(4096, 4096, device=HPU)

    def chain():
        return ((x * 2 + 1).relu() - 3).sigmoid()
    fused, unfused = pm.estimate(chain).device_ns, pm.estimate(chain, fusion=False).device_ns
    assert fused < unfused / 3          # one read + one write instead of five of each
    rep = pm.estimate(chain)
    (summary, c), = rep.recipes
    assert c.kernels == 1 and c.hbm_bytes == 2 * 4096 * 4096 * 4


def test_pinned_copy_cheaper_than_pageable():
    for card in pm.DEVICES.values():
        assert pm.copy_ns(64 << 20, card, pinned=True) < pm.copy_ns(64 << 20, card, pinned=False)


def test_ring_collective():
    g2 = pm.DEVICES["gaudi2"]
    assert pm.collective_ns("all_reduce", 1 << 30, 1, g2) == 0
    one, eight = pm.collective_ns("all_reduce", 1 << 30, 2, g2), pm.collective_ns("all_reduce", 1 << 30, 8, g2)
    assert one < eight < 2 * one        # 2(p-1)/p of the bytes: 1x for p=2, 1.75x for p=8
    assert pm.collective_ns("all_gather", 1 << 30, 8, g2) < eight


def test_a_lazy_collective_is_part_of_its_launch_on_the_clock():
    # a lazy all_reduce is a node of the launched graph (distributed/lazy_collectives): the launch
    # lasts its compute plus the ring time, the device's Collective sits inside it, a sync on the
    # launch waits for it. (It was a span after the launch, which ended without it: a host sync on
    # the launch did not wait for the all_reduce.)
    g2, nbytes = pm.DEVICES["gaudi2"], 64 << 20
    ring = pm.collective_ns("all_reduce", nbytes, 4, g2)
    node = ev.NodeInfo(1, "hccl_all_reduce_SUM_hccl1_of4", (nbytes // 4,), "float32", inputs=(0,),
                       in_shapes=((nbytes // 4,),), in_bytes=(nbytes,), out_bytes=nbytes)
    g = ev.GraphSummary((ev.NodeInfo(0, "input"), node, ev.NodeInfo(2, "output")), ((0, 1), (1, 2)))
    assert cost.recipe_cost(g, g2).nic_ns == ring and cost.recipe_cost(g, g2).tpc_ns == 0
    es = hand_made(ev.Launch(0, 0, "host", 0, launch_id=1, key="k", graph=g),
                 ev.Launch(0, 0, "host", 0, launch_id=2, key="k", graph=g))
    es += [ev.Collective(0, 0, "hpu:0", 0, op="all_reduce", nbytes=nbytes, world_size=4),
           ev.DeviceExecution(0, 0, "hpu:0", 0, launch_id=1, key="k"),
           ev.Collective(0, 0, "hpu:0", 0, op="all_reduce", nbytes=nbytes, world_size=4),
           ev.DeviceExecution(0, 0, "hpu:0", 0, launch_id=2, key="k")]
    es += hand_made(ev.HostSync(0, 0, "host", 0, launch_id=2))
    r = pm.retime(es, g2, host=ONE_US)
    ex = [e for e in r.events if isinstance(e, ev.DeviceExecution)]
    colls = [e for e in r.events if isinstance(e, ev.Collective)]
    for x, c in zip(ex, colls):
        assert x.t_end - x.t_start == g2.recipe_launch_ns + ring
        assert c.t_end - c.t_start == ring and c.t_end == x.t_end
    assert ex[1].t_start == ex[0].t_end
    sync = [e for e in r.events if isinstance(e, ev.HostSync)][0]
    assert sync.t_end == ex[1].t_end == r.wall_ns
    assert [s.kind for s in r.spans["hpu:0"]] == ["execute", "collective"] * 2


def test_estimate_runs_nothing_and_leaves_the_runtime_as_it_was():
    model, opt, step = seed_setup()
    step()
    torch.hpu.synchronize()
    before = [p.detach().cpu().clone() for p in model.parameters()]
    last = executor.stream(0).last()
    compiles = hpu_lab.observe.metrics.metric_global("graph_compilation").stats()
    with ev.Collector() as c:
        ns = pm.estimate(step, device="gaudi3").device_ns
    assert ns > 0 and not c.events                      # muted: no op, no launch reached observers
    assert not lazy.S.pg.nodes                          # no pending node left behind
    assert executor.stream(0).last() is last            # nothing launched
    assert hpu_lab.observe.metrics.metric_global("graph_compilation").stats() == compiles
    for p, b in zip(model.parameters(), before):        # the optimizer step inside was undone
        assert torch.equal(p.detach().cpu(), b)
    rep = pm.estimate(step)
    assert len(rep.recipes) == 2                        # two mark_steps: two recipes
    loss = step()                                       # the model still trains for real
    assert torch.isfinite(loss.cpu())


def test_estimate_refuses_a_host_sync_and_poisons_its_tensors():
    x = torch.ones(8, device=HPU)
    with pytest.raises(pm.EstimateError, match="1 op is pending; call htcore.mark_step"):
        pm.estimate(lambda: x * 2)
    htcore.mark_step()
    made = {}

    def needs_value():
        made["y"] = x * 2
        return (x + 1).sum().item()
    with pytest.raises(pm.EstimateError, match="host sync cannot be estimated"):
        pm.estimate(needs_value)
    assert not lazy.S.pg.nodes
    with pytest.raises(Exception, match="perfmodel.estimate"):
        made["y"].cpu()
    assert torch.equal((x + 1).cpu(), torch.full((8,), 2.0))    # runtime still usable


# ------------------------------------------------------------------ retime

def test_seed000_step_is_host_bound_on_every_card():
    _, _, step = seed_setup()
    events = record(step)
    for name in pm.DEVICES:
        r = pm.retime(events, name)
        assert r.verdict == "host-bound", r
        assert r.launches == 24 and r.host_ns > 0 and isinstance(r.wall_ns, int)
        assert r.device_busy_ns < 0.5 * r.wall_ns
    busy = [pm.retime(events, n).device_busy_ns for n in ("gaudi", "gaudi2", "gaudi3")]
    assert busy[0] > busy[1] > busy[2]


def _burner():
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def test_determinism_under_load():
    _, _, step = seed_setup()
    quiet = pm.retime(record(step), "gaudi2")
    burn = _burner()
    try:
        loaded = pm.retime(record(step), "gaudi2")
    finally:
        burn.kill()
        burn.wait()
    dev = lambda r: [(s.label, s.duration_ns) for lane, ss in sorted(r.spans.items()) if lane != "host" for s in ss]
    assert dev(quiet) == dev(loaded) and dev(quiet)
    assert quiet.verdict == loaded.verdict == "host-bound"
    assert quiet.device_busy_ns == loaded.device_busy_ns


def test_device_bound_work_and_syncs_wait_for_the_model():
    a = torch.randn(1024, 1024).to(HPU)

    def step():
        b = a
        for _ in range(8):
            b = b @ a
        htcore.mark_step()
        return b
    step().cpu()                                     # compiled outside the window
    with no_cyclic_gc(), ev.Collector() as c:        # host 1.7-3.1 ms against 5.4 ms of device here
        for _ in range(4):
            b = step()
        b.cpu()
    r = pm.retime(c.events, "gaudi")
    assert r.verdict == "device-bound", r
    execs = [e for e in r.events if isinstance(e, ev.DeviceExecution)]
    sync = [e for e in r.events if isinstance(e, ev.HostSync)][-1]
    assert sync.t_end >= max(e.t_end for e in execs) and r.sync_wait_ns > 0
    for e in execs:                                  # device spans queue: start >= launch, no overlap
        launch = next(x for x in r.events if isinstance(x, ev.Launch) and x.launch_id == e.launch_id)
        assert e.t_start >= launch.t_end
    ends = sorted((e.t_start, e.t_end) for e in execs)
    assert all(b0 <= a1 for (_, b0), (a1, _) in zip(ends, ends[1:]))


def test_a_sleep_is_your_code_on_the_clock():
    _, _, step = seed_setup(64)
    step()
    with ev.Collector() as c:
        for _ in range(4):
            time.sleep(0.03)                 # stands for a data loader waiting for its workers
            step()
        torch.hpu.synchronize()
    r = pm.retime(c.events, "gaudi2")
    sleeps = [e for e in c.events if isinstance(e, ev.UserCode)]
    # a sleep never returns early: each is at least its 30 ms, whatever the load
    assert [e.what for e in sleeps] == ["sleep"] * 4 and all(e.own_ns >= 30_000_000 for e in sleeps)
    assert r.user_ns == sum(e.own_ns for e in sleeps) and r.host_ns >= r.user_ns
    spans = [s for s in r.spans["host"] if s.kind == "UserCode"]
    assert [s.duration_ns for s in spans] == [e.own_ns for e in sleeps] and spans[0].label == "sleep"
    assert r.verdict == "host-bound"


def test_observers_do_not_change_the_host_lane():
    _, _, step = seed_setup(64)
    with no_cyclic_gc():
        light = pm.retime(record(step, n=6), "gaudi2")

    def heavy(e):                             # an expensive view on every op (e.g. a live redraw)
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 200_000:
            pass
    with no_cyclic_gc(), ev.subscribe(heavy, kinds=[ev.OpAccumulated]):
        loaded = pm.retime(record(step, n=6), "gaudi2")
    assert loaded.host_ns == light.host_ns and loaded.device_busy_ns == light.device_busy_ns


class _CostlyWait(threading.Event):
    """A sync's wait that costs the waiting thread CPU, as handing the interpreter lock back and
    forth with the device thread does (30-75 us a sync here; 20 ms so that it stands out)."""

    def wait(self, timeout=None):
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 20_000_000:
            pass
        self.set()
        return super().wait(timeout)


def test_the_emulator_s_wait_in_a_sync_is_not_host_time():
    x = torch.ones(64, 64).to("hpu")
    y = x + 1
    launch = lazy.mark_step()                 # (htcore's returns None, as the real one does)
    launch.done.wait()
    launch.done = _CostlyWait()               # the wait has not ended: the host waits for it
    with no_cyclic_gc(), ev.Collector() as c:
        z = x * 2                                 # a host event before the sync
        launch.wait("test")
    sync = c.of(ev.HostSync)[-1]
    assert sync.t_end - sync.t_start >= 20_000_000         # the wait really took that long
    host = pm.retime(c.events, "gaudi2").host_ns
    assert host == pm.HOST.op_ns + pm.HOST.sync_ns, host   # the modeled op and sync, not the 20 ms
    assert torch.equal(y.cpu(), torch.full((64, 64), 2.0)) and torch.equal(z.cpu(), y)


def test_hand_made_events_cost_their_modeled_host_time():
    g = ev.GraphSummary((ev.NodeInfo(0, "input"), ev.NodeInfo(1, "aten::relu", inputs=(0,)),
                         ev.NodeInfo(2, "output", inputs=(1,))), ((0, 1), (1, 2)))
    es = [ev.Launch(0, 0, "host", 0, launch_id=1, key="k", graph=g),
          ev.HostSync(5_000_000, 5_000_000, "host", 0, launch_id=0)]     # the value was on the host
    r = pm.retime(es, "gaudi2")
    h = pm.HOST
    assert r.host_ns == h.launch_ns + 2 * h.launch_tensor_ns + h.sync_ns and r.launches == 1
    assert any(isinstance(e, ev.DeviceExecution) for e in r.events)    # synthesized for the launch


# ------------------------------------------------------------------ views on the Gaudi clock

def test_views_default_to_the_gaudi_clock(tmp_path):
    import json
    import matplotlib
    matplotlib.use("Agg")
    import widgets
    from hpu_lab.observe import profiler
    _, _, step = seed_setup()
    events = record(step, n=6)
    v = widgets.verdict(events)
    assert v.bound == "host-bound" and v.clock == "Gaudi clock: GAUDI2 (modeled)"
    assert widgets.verdict(events, clock="measured").clock == "measured on this CPU"
    m = widgets.section_metrics(events, device="gaudi3")
    r = pm.retime(events, "gaudi3")
    assert m["clock"] == "Gaudi clock: GAUDI3 (modeled)" and m["device busy ms"] == round(r.device_busy_ns / 1e6, 3)
    fig = widgets.draw_timeline(events)
    assert "Gaudi clock: GAUDI2" in fig.axes[0].get_title(loc="left")
    fig = widgets.draw_timeline(events, clock="measured")
    assert "measured on this CPU" in fig.axes[0].get_title(loc="left")
    rows = widgets.compare_rows({"lazy": events})
    assert rows[0]["verdict"] == "host-bound" and rows[0]["device ms/step"] > 0
    trace = profiler.chrome_trace(events, device="gaudi")
    assert trace["traceEvents"][0]["args"]["name"] == "hpu_lab \u2014 Gaudi clock: GAUDI (modeled)"
    execs = [e for e in trace["traceEvents"] if e.get("cat") == "DeviceExecution"]
    want = sorted(s.duration_ns / 1e3 for s in pm.retime(events, "gaudi").spans["hpu:0"])
    assert sorted(e["dur"] for e in execs) == pytest.approx(want, abs=0.01)
    with pytest.raises(ValueError, match="clock"):
        profiler.chrome_trace(events, clock="wall")


# ------------------------------------------------------------------ validation machinery

def test_reference_models_estimate_without_running():
    from hpu_lab.perfmodel import models, validation
    step, args = models.bert_step(lambda **kw: models.Bert(2, 64, 2, 128, vocab=100, max_pos=32, **kw), 2, 16)
    first = pm.estimate(step, *args)
    steady = pm.estimate(step, *args)
    assert len(steady.recipes) == 2 and 0 < steady.device_ns < first.device_ns   # step 1 also creates state
    step, args = models.resnet50_step(2)
    r = pm.estimate(step, *args, device="gaudi")
    fwd_gflop = 2 * 4.1e9                            # ResNet-50: ~4.1 GMAC per 224x224 image
    assert 2.5 * fwd_gflop * 2 < r.total.flops < 3.5 * fwd_gflop * 2     # forward + backward (x3)
    assert not lazy.S.pg.nodes
    assert {w.role for w in validation.WORKLOADS} <= set(validation.ROLES)
    assert sum(w.role == "calibration" for w in validation.WORKLOADS) <= 2


# ------------------------------------------------------------------ copies on the Gaudi clock

def _loader_loop(pin_memory, non_blocking, steps=4, batch=256, workers=0):
    """A recorded training loop fed by a DataLoader: its H2D copies as the runtime really made them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3 * 64 * 64, 10).to(HPU)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = torch.utils.data.TensorDataset(torch.randn(steps * batch, 3 * 64 * 64),
                                        torch.randint(0, 10, (steps * batch,)))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, pin_memory=pin_memory, num_workers=workers)

    def step(x, y):
        x, y = x.to(HPU, non_blocking=non_blocking), y.to(HPU, non_blocking=non_blocking)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        htcore.mark_step()
    step(*next(iter(dl)))                       # compiled outside the window
    torch.hpu.synchronize()
    with ev.Collector() as c:
        for x, y in dl:
            step(x, y)
        torch.hpu.synchronize()
    return c.events


def _host_copy_ns(r):
    return sum(s.duration_ns for s in r.spans["host"] if s.kind == "HostToDevice")


def test_recorded_copies_cost_by_how_they_were_made():
    pageable, pinned, queued = (_loader_loop(False, False), _loader_loop(True, False), _loader_loop(True, True))
    h2d = lambda es: [e for e in es if isinstance(e, ev.HostToDevice)]
    assert all(not e.pinned and e.staging_bytes == e.nbytes and e.stream == -1 for e in h2d(pageable))
    assert all(e.pinned and e.staging_bytes == 0 and e.stream == -1 for e in h2d(pinned))
    assert all(e.pinned and e.stream == 0 and e.lane == "hpu:0" for e in h2d(queued)) and h2d(queued)
    for name, card in pm.DEVICES.items():
        a, b, q = (pm.retime(es, name) for es in (pageable, pinned, queued))
        # pageable: the host's staging memcpy + DMA; pinned: DMA only; non_blocking: the host does not wait
        assert _host_copy_ns(a) > _host_copy_ns(b) > _host_copy_ns(q) == 0, name
        nbytes = sum(e.nbytes for e in h2d(pinned))
        assert _host_copy_ns(a) - _host_copy_ns(b) == sum(cost.staging_ns(e.staging_bytes) for e in h2d(pageable))
        assert _host_copy_ns(b) >= nbytes / card.host_link_bw * 1e9
        copies = [s for s in q.spans["hpu:0"] if s.kind == "copy H2D"]
        assert len(copies) == len(h2d(queued)) and sum(s.duration_ns for s in copies) >= nbytes / card.host_link_bw * 1e9
        execs = [s for s in q.spans["hpu:0"] if s.kind == "execute"]
        for cp in copies:                       # launches on the stream after a copy start after its DMA
            later = [s for s in execs if s.start_ns >= cp.start_ns]
            assert all(s.start_ns >= cp.end_ns for s in later)


def test_device_to_host_read_costs_its_transfer():
    """A read-back (.cpu(), .item()) emits a DeviceToHost after its host sync; the Gaudi clock costs
    it as a pageable copy over the host link, in place of the emulator's memcpy."""
    a = torch.randn(1024, 1024).to(HPU)              # 4 MB
    torch.hpu.synchronize()
    with ev.Collector() as c:
        b = (a * 2).cpu()
        v = (a.sum()).item()
    assert torch.equal(b, a.cpu() * 2) and v == pytest.approx(float(a.cpu().sum()), rel=1e-4)
    d2h = c.of(ev.DeviceToHost)
    assert [e.nbytes for e in d2h] == [4 << 20, 4] and all(not e.pinned for e in d2h)
    kinds = [type(e) for e in c.events if isinstance(e, (ev.HostSync, ev.DeviceToHost))]
    assert kinds == [ev.HostSync, ev.DeviceToHost] * 2       # the copy follows the sync that made it possible
    for name, card in pm.DEVICES.items():
        r = pm.retime(c.events, name)
        spans = [s for s in r.spans["host"] if s.kind == "DeviceToHost"]
        assert [s.duration_ns for s in spans] == [cost.copy_ns(n, card, pinned=False) for n in (4 << 20, 4)]
        assert spans[0].duration_ns > (4 << 20) / card.host_link_bw * 1e9
    assert pm.retime(c.events, "gaudi3").spans["host"] and \
        _d2h_ns(pm.retime(c.events, "gaudi3")) < _d2h_ns(pm.retime(c.events, "gaudi2"))   # PCIe Gen5


def _d2h_ns(r):
    return sum(s.duration_ns for s in r.spans["host"] if s.kind == "DeviceToHost")


# ------------------------------------------------------------------ cross-stream order

def _two_stream_events(wait: bool):
    """A launch on stream 1, then (optionally) stream 0 waits for an event recorded on stream 1,
    then a launch on stream 0, 1 us of host CPU later. 1 us apart on the ONE_US host model."""
    marks = [ev.StreamRecord(0, 0, "host", 0, marker=7, stream=1),
             ev.StreamWait(0, 0, "host", 0, marker=7, stream=0)] if wait else []
    return hand_made(ev.Launch(0, 0, "host", 0, launch_id=1, key="side", stream=1), *marks,
                   ev.Launch(0, 0, "host", 0, launch_id=2, key="main", stream=0))


def test_a_stream_waiting_for_an_event_starts_after_the_recorded_work():
    for name in pm.DEVICES:
        free = pm.retime(_two_stream_events(False), name, host=ONE_US)
        side, = free.spans["hpu:1"]
        main, = free.spans["hpu:0"]
        assert main.start_ns < side.end_ns                  # without a wait the streams overlap
        ordered = pm.retime(_two_stream_events(True), name, host=ONE_US)
        side, = ordered.spans["hpu:1"]
        main, = ordered.spans["hpu:0"]
        assert main.start_ns == side.end_ns and main.duration_ns == side.duration_ns
        assert ordered.wall_ns == main.end_ns > free.wall_ns


def test_recorded_stream_waits_order_the_modeled_device_lanes():
    side = torch.hpu.Stream()
    a = torch.randn(256, 256).to(HPU)
    torch.hpu.synchronize()
    with ev.Collector() as c:
        with torch.hpu.stream(side):
            b = a @ a
            done = side.record_event()                   # flushes: the matmul is launched on `side`
        torch.hpu.current_stream().wait_event(done)
        d = (b + 1).sum()
        htcore.mark_step()
        torch.hpu.current_stream().wait_stream(side)     # a second wait, on a new marker
        torch.hpu.synchronize()
    assert torch.allclose(d.cpu(), (a.cpu() @ a.cpu() + 1).sum(), rtol=1e-4)
    rec, waits = c.of(ev.StreamRecord), c.of(ev.StreamWait)
    assert [e.stream for e in rec] == [side.stream_id] * 2 and [e.stream for e in waits] == [0, 0]
    assert [w.marker for w in waits] == [r.marker for r in rec] and rec[0].marker != rec[1].marker
    r = pm.retime(c.events, "gaudi2")
    side_end = max(s.end_ns for s in r.spans[f"hpu:{side.stream_id}"])
    assert all(s.start_ns >= side_end for s in r.spans["hpu:0"])
    assert r.spans["hpu:0"]


# ------------------------------------------------------------------ observing does not distort

def test_a_live_panel_leaves_the_modeled_figures_as_they_were():
    """The same loop recorded bare and under a live panel redrawing as often as it can: the device
    lanes are identical, and the panel's redraws (each ~100 ms of CPU) are not the user's host time."""
    import matplotlib
    matplotlib.use("Agg")
    from widgets.panel import SectionPanel
    _, _, step = seed_setup(64)
    for _ in range(3):
        step()
    torch.hpu.synchronize()
    p = SectionPanel("t", min_interval=0.02, budget=0.9)
    n = 0
    with no_cyclic_gc(), ev.Collector() as c:
        p.attach(live=True)
        # as many steps as it takes the panel to redraw twice (a count, not a duration: a fast
        # machine needs more steps, a loaded one fewer)
        while n < 20 or (p.stats["live_refreshes"] < 2 and n < 2000):
            step()
            n += 1
        torch.hpu.synchronize()
        p.detach()
    watched = pm.retime(c.events, "gaudi2")
    assert p.stats["live_refreshes"] >= 2
    with no_cyclic_gc():
        bare = pm.retime(record(step, n=n), "gaudi2")
    assert [s.duration_ns for s in bare.spans["hpu:0"]] == [s.duration_ns for s in watched.spans["hpu:0"]]
    assert bare.launches == watched.launches and bare.verdict == watched.verdict == "host-bound"
    assert watched.host_ns == bare.host_ns      # the panel's redraws are not on the modeled host lane


def test_a_verdict_that_rests_on_the_fp32_matrix_rate_says_it_is_assumed():
    """No source publishes Gaudi's or Gaudi 2's FP32 matrix rate (cards.py: a quarter of BF16,
    assumed): a verdict whose device time is mostly FP32 matrix work says so; a BF16 one does not."""
    for dtype, assumed in ((torch.float32, True), (torch.bfloat16, False)):
        a = torch.empty(2048, 2048, dtype=dtype, device=HPU)
        kept = []
        with ev.Collector() as c:
            for _ in range(2):
                kept.append((a @ a).sum())          # (held: an unread result is dead code)
                htcore.mark_step()
            torch.hpu.synchronize()
        r = pm.retime(c.events, "gaudi2")
        assert r.fp32_assumed is assumed and ("FP32 matrix rate assumed" in r.verdict_text) is assumed
        e = pm.estimate(lambda: a @ a, device="gaudi2")
        assert e.fp32_assumed is assumed and ("FP32 matrix rate assumed" in repr(e)) is assumed
        # Gaudi 3's FP32 rate is published (1/8 of BF16 [G3WP]); the precision of a float32 matmul is not
        g3 = pm.retime(c.events, "gaudi3")
        assert g3.fp32_assumed is assumed and ("Intel Gaudi 3's published 1/8 of BF16" in g3.verdict_text) is assumed
        assert "1/4 of BF16" not in g3.verdict_text
