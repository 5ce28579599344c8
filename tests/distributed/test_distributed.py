"""hpu_lab.distributed: the "hccl" backend, DDP over it, fast_ddp, lazy collectives (claims O6, M8, I7).

Each test starts two real processes on loopback (world size 2, a free port, bounded timeouts) that
run one scenario of this file (``python tests/distributed/test_distributed.py <scenario>``) and print one
``RESULT <rank> <json>`` line; the test checks the numbers against plain CPU torch and the counts.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TIMEOUT = 150


# ---------------------------------------------------------------- launching

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PT_HPU_ENABLE_LAZY_COLLECTIVES", None)
    env.update(extra or {})
    return env


def _results(out: str, world: int = 2):
    res = {}
    # torchrun's ranks share one stdout: one rank's RESULT may follow another's on the same line,
    # so each payload is decoded where its marker starts, wherever that is
    for m in re.finditer(r"RESULT (\d+) ", out):
        res[int(m.group(1))], _ = json.JSONDecoder().raw_decode(out, m.end())
    assert sorted(res) == list(range(world)), out[-4000:]
    return res


def spawn(scenario: str, world: int = 2, script: str = __file__):
    """``world`` processes with torchrun's variables set by hand (no elastic agent: quicker), each
    running ``script scenario...`` (this file's scenario, by default)."""
    for attempt in range(3):
        port = _free_port()
        procs = []
        for r in range(world):
            env = _env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
                        "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            procs.append(subprocess.Popen([sys.executable, script, *scenario.split()], env=env, cwd=ROOT,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = []
        try:
            for p in procs:
                out, _ = p.communicate(timeout=TIMEOUT)
                outs.append(out)
                # rank 0 could not bind the port (taken since _free_port closed it, see torchrun):
                # the other ranks would wait for a store that is not there, or is someone else's
                if p is procs[0] and p.returncode != 0 and "EADDRINUSE" in out and attempt < 2:
                    break
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if len(outs) == world:
            break
    text = "\n".join(outs)
    assert all(p.returncode == 0 for p in procs), text[-6000:]
    return _results(text, world)


def torchrun(scenario: str, world: int = 2, port=None):
    for attempt in range(3):
        port_now = port or _free_port()
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               "--master_addr=127.0.0.1", f"--master_port={port_now}", __file__, scenario]
        p = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
        # the free port is closed before torchrun binds it: on a busy machine (other test runs'
        # gloo connections take ephemeral ports too) someone else may take it in between. Then
        # the rendezvous fails at once with EADDRINUSE, before any rank ran: try another port
        if p.returncode != 0 and "EADDRINUSE" in p.stderr and port is None and attempt < 2:
            continue
        assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]
        return _results(p.stdout)


# ---------------------------------------------------------------- the tests

def test_a_taken_rendezvous_port_fails_with_eaddrinuse():
    """What torchrun() retries on: the port it was given was taken in the meantime."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(AssertionError, match="EADDRINUSE"):
            torchrun("basic", port=s.getsockname()[1])


def test_hccl_collectives_under_torchrun():
    res = torchrun("basic")
    for rank, r in res.items():
        assert r["init"] == [2, rank, rank]
        assert r["backend"] == "hccl"
        assert r["sum"] == [3.0] * 4 and r["max"] == [2.0] * 4 and r["avg"] == [1.5] * 4
        assert r["view_base"] == [0.0, 3.0, 3.0, 0.0]        # a view all-reduced: the base sees it
        assert r["lazy_input"] == [6.0, 6.0]                  # a pending lazy value is flushed first
        assert r["broadcast"] == [1.0, 1.0, 1.0]
        assert r["all_gather"] == [[1.0, 1.0], [2.0, 2.0]]
        assert r["all_gather_into_tensor"] == [1.0, 1.0, 2.0, 2.0]
        assert r["reduce_scatter_tensor"] == [[3.0, 3.0], [30.0, 30.0]][rank]
        assert r["reduce_scatter"] == [[3.0, 3.0], [30.0, 30.0]][rank]
        assert r["cpu_tensor"] == [3.0]
        assert r["all_gather_object"] == [{"rank": 0}, {"rank": 1}]
        assert r["events"]["all_reduce"] == {"nbytes": 16, "lane": "host", "src": "test_distributed.py"}
        assert r["host_sync_reasons"].get("collective all_reduce", 0) >= 3
        m = r["metric"]
        assert m["Ops"]["all_reduce"] == 6 and m["Ops"]["barrier"] == 1
        assert m["TotalNumber"] == sum(m["Ops"].values())


def test_ddp_bucket_sizes_and_fast_ddp_match_cpu():
    res = spawn("ddp")
    r0, r1 = res[0], res[1]
    for r in (r0, r1):
        # claim M8: after DDP's first iteration (one bucket) buckets follow bucket_cap_mb
        assert r["ddp_big"]["allreduce_per_step"] == [1, 1, 1]
        small = r["ddp_small"]["allreduce_per_step"]
        assert small[0] == 1 and small[1] == small[2] and small[1] >= 3
        # claim O6: fast_ddp is one all_reduce per step, whatever the model
        assert r["fast_ddp_fp32"]["allreduce_per_step"] == [1, 1, 1]
        assert r["fast_ddp_bf16"]["allreduce_per_step"] == [1, 1, 1]
        assert r["fast_ddp_fp32"]["hpu_graph_replays"] == 6           # pack + unpack, 3 steps
        for k in ("ddp_big", "ddp_small", "ddp_grad_view", "fast_ddp_fp32", "fast_ddp_nograph"):
            assert r[k]["max_abs_diff_vs_cpu"] <= 1e-6, (k, r[k])
        assert r["fast_ddp_bf16"]["max_abs_diff_vs_cpu"] <= 2e-3
    # every rank holds the same parameters
    for k in ("ddp_big", "ddp_small", "fast_ddp_fp32", "fast_ddp_bf16"):
        assert r0[k]["checksum"] == r1[k]["checksum"]
    assert r0["ddp_small"]["allreduce_per_step"][1] > r0["ddp_big"]["allreduce_per_step"][1]


def test_ddp_static_graph_and_find_unused_parameters_under_torchrun_match_cpu():
    # the reducer stages its used-parameter map in pinned memory: for a PrivateUse1 device torch
    # asked hooks a Python backend cannot fill (getPinnedMemoryAllocator ... PrivateUse1)
    res = torchrun("ddp_used_map")
    for r in res.values():
        for k in ("static_graph", "find_unused"):
            assert r[k]["max_abs_diff_vs_cpu"] <= 1e-6, (k, r[k])
            assert r[k]["allreduce_per_step"][0] >= 1
        assert r["staging_after"] is False          # torch's own factory kernel once the modules are gone
    assert res[0]["static_graph"]["checksum"] == res[1]["static_graph"]["checksum"]
    assert res[0]["find_unused"]["checksum"] == res[1]["find_unused"]["checksum"]


def test_lazy_collectives_and_multicard_hpu_graph_inference():
    res = spawn("lazy")
    for rank, r in res.items():
        # claim I7, without PT_HPU_ENABLE_LAZY_COLLECTIVES: the capture fails, naming the variable
        assert "PT_HPU_ENABLE_LAZY_COLLECTIVES=true" in r["without"]["error"]
        assert "HPUGraphError" == r["without"]["type"]
        assert r["without"]["usable_after"] is True
        # with it: a collective is a graph node, no host sync until the graph runs
        lz = r["lazy"]
        assert lz["collectives_before_mark_step"] == 0 and lz["host_syncs_before_mark_step"] == 0
        assert lz["collectives_after"] == 2 and lz["lane"] == "hpu:0"
        assert lz["value"] == [3.0, 3.0, 3.0] and lz["max"] == [2.0, 2.0, 2.0]
        assert lz["view_base"] == [0.0, 3.0, 3.0, 0.0]
        # the Gaudi clock: the device ran the all_reduce inside its launch, for its ring-model time,
        # and the host's read of the result waits for it (it was a span after the launch's end)
        k = lz["clock"]
        assert lz["big"] == [4.0, 4.0] and k["lane"] == "hpu:0" and k["ring_ns"] > 0
        assert k["collective_ns"] == k["ring_ns"] and k["inside_its_launch"] and k["sync_after_it"]
        assert k["spans"] == ["execute", "collective"]
        # and an .item() of an all-reduced value waits for the collective, which ends its launch
        assert lz["item"] == 3.0
        assert lz["item_clock"] == {"reason": ".item()", "launch_ends_with_it": True, "read_after_it": True}
        # claim I7, with it: wrap_in_hpu_graph captures the tensor-parallel forward and replays it
        w = r["with"]
        assert w["max_abs_diff_vs_cpu"] <= 1e-5
        assert w["captures"] == 1 and w["replays"] == 3
        assert w["collectives_per_call"] == [1, 1, 1, 1]
        assert w["compiles_in_replays"] == 0
        # DDP with lazy collectives: the bucket all-reduces run on the device, same numbers
        d = r["ddp_lazy"]
        assert d["max_abs_diff_vs_cpu"] <= 1e-6 and d["lanes"] == ["hpu:0"]
        assert d["host_syncs_for_collectives"] == 0


CARDS = os.path.join(ROOT, "hpu_lab", "lab", "answers", "cards.py")    # notebook 08's reference multicard.py


def test_a_collective_refused_in_a_no_grad_capture_names_the_scripts_line():
    """cards.py's column-parallel forward, under torch.no_grad() in wrap_in_hpu_graph, without lazy
    collectives: the all_gather is refused at its own line of the script each card runs (a file of
    hpu_lab's folder, but run as the program), as any refused op names the user's line, not "<backward>"."""
    lines = open(CARDS).read().splitlines()
    (line,) = [i for i, text in enumerate(lines, 1) if "dist.all_gather(parts, y)" in text]
    (report,) = spawn("inference column", world=1, script=CARDS).values()
    assert report["layer"] == "ColumnParallelLinear"
    assert report["error"].startswith("HPUGraphError: torch.distributed.all_gather is not supported during HPU "
                                      f"Graph capturing (at cards.py:{line}):"), report["error"]


def test_destroy_process_group_frees_the_group_and_its_gloo_threads():
    """init_process_group right after `import hpu_lab`, while the background warm-up still imports
    torch.distributed.nn.functional (its functions' default group is read at import): the group
    must not become their default, so destroy_process_group frees it and joins its gloo threads."""
    (r,) = spawn("destroy", world=1).values()
    assert r["nn_functional_default_group"] == "NoneType"
    assert r["alive_after_destroy"] is False
    assert r["threads_after_destroy"] < r["threads_before_destroy"], r

def test_initialize_distributed_hpu_reads_torchrun_and_mpi_variables(monkeypatch):
    import hpu_lab  # noqa: F401
    from hpu_lab.distributed.hccl import initialize_distributed_hpu
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "ID", "OMPI_COMM_WORLD_SIZE",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "HLS_MODULE_ID", "HABANA_VISIBLE_MODULES"):
        monkeypatch.setenv(k, "")         # recorded, so that what initialize_distributed_hpu sets is undone
        monkeypatch.delenv(k)
    assert initialize_distributed_hpu() == (1, -1, -1)
    assert os.environ["MASTER_ADDR"] == "localhost" and os.environ["MASTER_PORT"] == "12345"
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "5")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert initialize_distributed_hpu() == (8, 5, 1)
    assert os.environ["RANK"] == "5" and os.environ["ID"] == "5"
    assert initialize_distributed_hpu(4, 2, 0) == (4, 2, 0)
    import torch.distributed as dist
    assert dist.Backend.default_device_backend_map["hpu"] == "hccl"


# ---------------------------------------------------------------- the scenarios (run in workers)

def _report(rank, payload):
    print(f"RESULT {rank} {json.dumps(payload)}", flush=True)


def _init():
    import torch.distributed as dist
    import hpu_lab.compat
    hpu_lab.compat.enable_habana_imports()          # the seeds' spelling; registers hpu and hccl
    from habana_frameworks.torch.distributed.hccl import initialize_distributed_hpu
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)     # torch's renamed collectives
    ws, rank, lr = initialize_distributed_hpu()
    dist.init_process_group("hccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=60))
    return ws, rank, lr


def scenario_basic():
    import torch
    import torch.distributed as dist
    from hpu_lab import events as ev
    from hpu_lab.observe.metrics import metric_localcontext
    init = _init()
    rank = dist.get_rank()
    out = {"init": list(init), "backend": dist.get_backend()}
    with ev.Collector() as c, metric_localcontext("collective") as m, metric_localcontext("host_sync") as hs:
        t = torch.full((4,), float(rank + 1), device="hpu")
        dist.all_reduce(t)
        out["sum"] = t.cpu().tolist()
        t = torch.full((4,), float(rank + 1), device="hpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out["max"] = t.cpu().tolist()
        t = torch.full((4,), float(rank + 1), device="hpu")
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        out["avg"] = t.cpu().tolist()
        base = torch.zeros(4, device="hpu")
        v = base[1:3]
        v.fill_(float(rank + 1))
        dist.all_reduce(v)
        out["view_base"] = base.cpu().tolist()
        x = torch.full((2,), float(rank + 1), device="hpu") * 2        # pending in the lazy graph
        dist.all_reduce(x)
        out["lazy_input"] = x.cpu().tolist()
        b = torch.full((3,), float(rank + 1), device="hpu")
        dist.broadcast(b, src=0)
        out["broadcast"] = b.cpu().tolist()
        g = [torch.empty(2, device="hpu") for _ in range(2)]
        dist.all_gather(g, torch.full((2,), float(rank + 1), device="hpu"))
        out["all_gather"] = [x.cpu().tolist() for x in g]
        gt = torch.empty(4, device="hpu")
        dist.all_gather_into_tensor(gt, torch.full((2,), float(rank + 1), device="hpu"))
        out["all_gather_into_tensor"] = gt.cpu().tolist()
        inp = torch.tensor([1.0, 1.0, 10.0, 10.0], device="hpu") * (rank + 1)
        rs = torch.empty(2, device="hpu")
        dist.reduce_scatter_tensor(rs, inp)
        out["reduce_scatter_tensor"] = rs.cpu().tolist()
        rs2 = torch.empty(2, device="hpu")
        dist.reduce_scatter(rs2, [inp[:2].clone(), inp[2:].clone()])
        out["reduce_scatter"] = rs2.cpu().tolist()
        ct = torch.tensor([float(rank + 1)])
        dist.all_reduce(ct)                                             # cpu tensors go to gloo as they are
        out["cpu_tensor"] = ct.tolist()
        objs = [None, None]
        dist.all_gather_object(objs, {"rank": rank})
        out["all_gather_object"] = objs
        dist.barrier()
    e = c.of(ev.Collective)[0]
    out["events"] = {e.op: {"nbytes": e.nbytes, "lane": e.lane, "src": e.src.split(":")[0]}}
    out["metric"] = dict(m.stats())
    out["host_sync_reasons"] = dict(hs.stats())["Reasons"]
    dist.destroy_process_group()
    _report(rank, out)


def _mlp(seed=0):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def _batches(steps, world):
    import torch
    g = torch.Generator().manual_seed(1234)
    return [[(torch.randn(8, 32, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(world)]
            for _ in range(steps)]


def _cpu_reference(steps, world, lr=0.1):
    """Plain CPU torch: the gradient of each rank's batch, averaged, then an SGD step."""
    import torch
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in _batches(steps, world):
        grads = None
        for x, y in step:
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            gs = [p.grad / world for p in model.parameters()]
            grads = gs if grads is None else [a + b for a, b in zip(grads, gs)]
        for p, gr in zip(model.parameters(), grads):
            p.grad = gr
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _train(mode, rank, world, steps=3, lr=0.1, **kw):
    import torch
    import hpu_lab.core as htcore
    from hpu_lab.distributed.fast_ddp import all_reduce_gradients
    from hpu_lab.observe.metrics import metric_global, metric_localcontext
    model = _mlp().to("hpu")
    if mode == "ddp":
        net = torch.nn.parallel.DistributedDataParallel(model, **kw)
    else:
        net = model
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    per_step, replays0 = [], metric_global("hpu_graph").replays
    for step in _batches(steps, world):
        x, y = step[rank]
        with metric_localcontext("collective") as m:
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(net(x.to("hpu")), y.to("hpu"))
            loss.backward()
            if mode == "fast_ddp":
                all_reduce_gradients(model, **kw)
            opt.step()
            htcore.mark_step()
            torch.hpu.synchronize()
        per_step.append(m.ops.get("all_reduce", 0))
    params = [p.detach().cpu() for p in model.parameters()]
    return {"allreduce_per_step": per_step, "params": params,
            "hpu_graph_replays": metric_global("hpu_graph").replays - replays0}


def _summary(res, ref):
    import torch
    params = res.pop("params")
    res["max_abs_diff_vs_cpu"] = max(float((a - b).abs().max()) for a, b in zip(params, ref))
    res["checksum"] = float(sum(p.double().sum() for p in params))
    return res


def scenario_ddp():
    import torch
    import torch.distributed as dist
    world, rank, _ = _init()
    ref = _cpu_reference(3, world)
    out = {}
    out["ddp_big"] = _summary(_train("ddp", rank, world, bucket_cap_mb=25), ref)
    out["ddp_small"] = _summary(_train("ddp", rank, world, bucket_cap_mb=0.05), ref)
    out["ddp_grad_view"] = _summary(_train("ddp", rank, world, bucket_cap_mb=0.05, gradient_as_bucket_view=True), ref)
    out["fast_ddp_fp32"] = _summary(_train("fast_ddp", rank, world, fusion_buffer_dtype=torch.float32), ref)
    out["fast_ddp_nograph"] = _summary(_train("fast_ddp", rank, world, fusion_buffer_dtype=torch.float32,
                                              use_hpu_graphs=False), ref)
    out["fast_ddp_bf16"] = _summary(_train("fast_ddp", rank, world), ref)
    dist.destroy_process_group()
    _report(rank, out)


def scenario_ddp_used_map():
    """DDP's reducer all-reducing its map of used parameters: static_graph (its first iteration) and
    find_unused_parameters (every iteration), which stage the map in pinned host memory."""
    import gc
    import torch
    import torch.distributed as dist
    from hpu_lab.distributed import ddp_reducer
    world, rank, _ = _init()
    ref = _cpu_reference(3, world)
    out = {}
    out["static_graph"] = _summary(_train("ddp", rank, world, static_graph=True), ref)
    out["find_unused"] = _summary(_train("ddp", rank, world, find_unused_parameters=True), ref)
    gc.collect()
    out["staging_after"] = ddp_reducer.active()
    dist.destroy_process_group()
    _report(rank, out)


def _tp_model(rank, world):
    import torch
    import torch.distributed as dist

    class RowParallelLinear(torch.nn.Module):
        def __init__(self, full):
            super().__init__()
            k = full.in_features // world
            self.weight = torch.nn.Parameter(full.weight.detach()[:, rank * k:(rank + 1) * k].clone())
            self.bias = torch.nn.Parameter(full.bias.detach().clone())
            self.k = k

        def forward(self, x):
            y = x[:, rank * self.k:(rank + 1) * self.k] @ self.weight.t()
            dist.all_reduce(y)
            return y + self.bias

    torch.manual_seed(0)
    full = torch.nn.Linear(16, 8)
    return full, RowParallelLinear(full)


def scenario_lazy():
    import torch
    import torch.distributed as dist
    import hpu_lab.core as htcore
    from hpu_lab import config, events as ev
    from hpu_lab.observe.metrics import metric_global, metric_localcontext
    world, rank, _ = _init()
    out = {}
    full, tp = _tp_model(rank, world)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(7))

    # without lazy collectives: the capture is refused, naming the variable
    model = torch.hpu.wrap_in_hpu_graph(_tp_model(rank, world)[1].to("hpu").eval())
    try:
        with torch.no_grad():
            model(x.to("hpu"))
        out["without"] = {"error": "", "type": ""}
    except Exception as e:                                   # noqa: BLE001
        out["without"] = {"error": str(e), "type": type(e).__name__}
    with torch.no_grad():                                    # the runtime stays usable (no graph)
        y = tp.to("hpu")(x.to("hpu"))
    out["without"]["usable_after"] = bool(torch.allclose(y.cpu(), full(x), atol=1e-5))

    config.set(PT_HPU_ENABLE_LAZY_COLLECTIVES="true")
    with ev.Collector([ev.Collective]) as c, metric_localcontext("collective") as m, \
            metric_localcontext("host_sync") as hs:
        t = torch.full((3,), float(rank + 1), device="hpu")
        dist.all_reduce(t)
        base = torch.zeros(4, device="hpu")
        base[1:3].fill_(float(rank + 1))
        dist.all_reduce(base[1:3])
        lz = {"collectives_before_mark_step": m.total, "host_syncs_before_mark_step": hs.total}
        htcore.mark_step()
        torch.hpu.synchronize()
        lz["collectives_after"] = m.total
        t2 = torch.full((3,), float(rank + 1), device="hpu")       # same graph but MAX: another recipe
        dist.all_reduce(t2, op=dist.ReduceOp.MAX)
        htcore.mark_step()
        lz["max"] = t2.cpu().tolist()
        lz["lane"] = c.events[0].lane if c.events else ""
        lz["value"] = t.cpu().tolist()
        lz["view_base"] = base.cpu().tolist()
    # on the modeled Gaudi clock: the all_reduce is part of its launch (4 MiB over the ring)
    from hpu_lab import perfmodel as pm
    big = torch.ones(1 << 20, device="hpu")
    htcore.mark_step()
    torch.hpu.synchronize()
    with ev.Collector() as c:
        y = big * (rank + 1)
        dist.all_reduce(y)
        z = y + 1
        htcore.mark_step()
        lz["big"] = z[:2].cpu().tolist()
    r = pm.retime(c.events, "gaudi2")
    (coll,) = [e for e in r.events if isinstance(e, ev.Collective)]
    (ex,) = [e for e in r.events if isinstance(e, ev.DeviceExecution)]
    (sync,) = [e for e in r.events if isinstance(e, ev.HostSync) and e.launch_id]
    lz["clock"] = {"lane": coll.lane, "collective_ns": coll.t_end - coll.t_start,
                   "ring_ns": pm.collective_ns("all_reduce", 4 << 20, world, pm.card("gaudi2")),
                   "inside_its_launch": ex.t_start <= coll.t_start and coll.t_end <= ex.t_end,
                   "sync_after_it": sync.t_end >= coll.t_end,
                   "spans": [s.kind for s in r.spans[coll.lane]]}
    # .item() of the all-reduced value, no mark_step: the read launches the graph and waits for it
    with ev.Collector() as c:
        y = big * (rank + 1)
        dist.all_reduce(y)
        lz["item"] = y[1].item()
    r = pm.retime(c.events, "gaudi2")
    (coll,) = [e for e in r.events if isinstance(e, ev.Collective)]
    (ex,) = [e for e in r.events if isinstance(e, ev.DeviceExecution)]
    (sync,) = [e for e in r.events if isinstance(e, ev.HostSync) and e.launch_id]
    lz["item_clock"] = {"reason": sync.reason, "launch_ends_with_it": coll.t_end == ex.t_end > coll.t_start,
                        "read_after_it": sync.t_end >= coll.t_end}
    out["lazy"] = lz

    # multi-card HPU Graph inference (seed 001): capture once, replay with new inputs
    model = torch.hpu.wrap_in_hpu_graph(_tp_model(rank, world)[1].to("hpu").eval())
    diffs, per_call = [], []
    comp0 = metric_global("graph_compilation").total
    hg = metric_global("hpu_graph")
    c0, r0 = hg.captures, hg.replays
    for i in range(4):
        xi = torch.randn(4, 16, generator=torch.Generator().manual_seed(100 + i))
        with metric_localcontext("collective") as m, torch.no_grad():
            y = model(xi.to("hpu")).cpu()
            torch.hpu.synchronize()
        per_call.append(m.total)
        diffs.append(float((y - full(xi)).abs().max()))
        if i == 0:
            comp0 = metric_global("graph_compilation").total
    out["with"] = {"max_abs_diff_vs_cpu": max(diffs), "collectives_per_call": per_call,
                   "captures": hg.captures - c0, "replays": hg.replays - r0,
                   "compiles_in_replays": metric_global("graph_compilation").total - comp0}

    # DDP with lazy collectives
    ref = _cpu_reference(3, world)
    with ev.Collector([ev.Collective]) as c, metric_localcontext("host_sync") as hs:
        res = _summary(_train("ddp", rank, world, bucket_cap_mb=0.05), ref)
    res["lanes"] = sorted({e.lane for e in c.events if e.op == "all_reduce"})
    res["host_syncs_for_collectives"] = sum(v for k, v in hs.reasons.items() if k.startswith("collective"))
    out["ddp_lazy"] = res
    config.set(PT_HPU_ENABLE_LAZY_COLLECTIVES="false")
    dist.destroy_process_group()
    _report(rank, out)


def scenario_destroy():
    import gc
    import weakref
    import torch
    import torch.distributed as dist
    import hpu_lab  # noqa: F401  (starts the background warm-up)
    dist.init_process_group("hccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    t = torch.ones(3, device="hpu")
    dist.all_reduce(t)
    t.cpu()
    import torch.distributed.nn.functional as fn
    group = weakref.ref(dist.group.WORLD)
    threads = len(os.listdir("/proc/self/task"))
    dist.destroy_process_group()
    gc.collect()
    _report(0, {"nn_functional_default_group": type(fn.all_reduce.__defaults__[-1]).__name__,
                "alive_after_destroy": group() is not None, "threads_before_destroy": threads,
                "threads_after_destroy": len(os.listdir("/proc/self/task"))})


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    globals()[f"scenario_{sys.argv[1]}"]()
