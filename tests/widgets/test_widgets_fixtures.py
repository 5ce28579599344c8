"""Synthetic but realistic event streams for the widget tests (no runtime involved).

``Sim`` plays the part of the runtime: a host clock and one device clock per stream, lazy ops
accumulating, mark_step building/looking up/compiling/launching a graph, the device running it
asynchronously, host syncs waiting for the device. Other widget test modules import it.
"""
from __future__ import annotations

from hpu_lab import events as ev

MS = 1_000_000  # ns


def mlp_summary(batch=32, with_cluster=True, cast=False, fallback=False) -> ev.GraphSummary:
    """input x, w1, b1, w2 -> addmm -> relu -> (mul -> add: a fusion cluster) -> addmm -> output."""
    N = ev.NodeInfo
    nodes = [
        N(0, "input", (batch, 64), "float32", "", tensor_class="persistent"),
        N(1, "input", (128, 64), "float32", "", tensor_class="persistent"),
        N(2, "input", (128,), "float32", "", tensor_class="persistent"),
        N(3, "view", (64, 128), "float32", "TPC", tensor_class="alias"),
        N(4, "aten::addmm", (batch, 128), "float32", "MME", src="train.py:9", tensor_class="non-persistent"),
        N(5, "aten::relu", (batch, 128), "float32", "TPC", cluster=0 if with_cluster else -1, src="train.py:9"),
        N(6, "aten::mul", (batch, 128), "float32", "TPC", cluster=0 if with_cluster else -1, src="train.py:10"),
        N(7, "aten::add", (batch, 128), "float32", "TPC", cluster=0 if with_cluster else -1, src="train.py:10"),
        N(8, "aten::_to_copy" if cast else "aten::clone", (batch, 128), "bfloat16" if cast else "float32",
          "TPC", is_cast=cast, src="train.py:11"),
        N(9, "aten::digamma" if fallback else "aten::sum", (), "float32", "CPU" if fallback else "TPC",
          src="train.py:12"),
        N(10, "output", (), "", ""),
    ]
    edges = [(1, 3), (0, 4), (3, 4), (2, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10), (8, 10)]
    return ev.GraphSummary(tuple(nodes), tuple(edges))


def chain_summary(n_ops: int, cluster_every: int = 5) -> ev.GraphSummary:
    """A long chain input -> op_1 -> ... -> op_n -> output: runs of ``cluster_every`` TPC ops (one
    fusion cluster each) separated by one MME op."""
    nodes = [ev.NodeInfo(0, "input", (8, 8), "float32", "")]
    cid = 0
    for i in range(1, n_ops + 1):
        eng = "MME" if i % (cluster_every + 1) == 0 else "TPC"
        cid += eng == "MME"
        cl = -1 if eng == "MME" else cid
        nodes.append(ev.NodeInfo(i, "aten::mm" if eng == "MME" else "aten::mul", (8, 8), "float32", eng, cluster=cl))
    nodes.append(ev.NodeInfo(n_ops + 1, "output", (), "", ""))
    edges = tuple((i, i + 1) for i in range(n_ops + 1))
    return ev.GraphSummary(tuple(nodes), edges)


class Sim:
    """A tiny stand-in for the runtime that emits the same kinds of events, with chosen timings."""

    def __init__(self, t0=1_000 * MS):
        self.t = t0                    # host clock (ns)
        self.dev_free = {0: t0}        # device stream -> time it becomes free
        self.step = 0
        self.events: list = []
        self.pending = 0
        self.keys_seen = {}            # key -> recipe id
        self.next_launch = 0
        self.last_launch_end = t0

    def _emit(self, e):
        self.events.append(e)
        return e

    def host(self, dur_ms):
        """The host does untraced Python work (data loading, logging) for dur_ms."""
        self.t += int(dur_ms * MS)

    def op(self, name="aten::mul", n=1, each_us=20, src="train.py:9"):
        for _ in range(n):
            self.t += int(each_us * 1000)
            self._emit(ev.OpAccumulated(self.t, self.t, "host", self.step, op=name, shapes=((32, 64),),
                                        dtype="float32", src=src))
            self.pending += 1

    def mark_step(self, key="k0", reason=None, compile_ms=30.0, device_ms=2.0, summary=None, stream=0,
                  src="train.py:20", build_ms=0.3):
        """Build the pending graph, look it up (compile on a miss) and launch it; return at once."""
        summary = summary if summary is not None else mlp_summary()
        t_ms = self.t
        gb0 = self.t
        self.t += int(build_ms * MS)
        self._emit(ev.GraphBuilt(gb0, self.t, "host", self.step, graph_id=self.step,
                                 node_count=len(summary.nodes), input_count=3, output_count=1,
                                 trigger="mark_step", src=src))
        hit = key in self.keys_seen
        l0 = self.t
        self.t += 20_000
        self._emit(ev.CacheLookup(l0, self.t, "host", self.step, hit=hit, key=key))
        if not hit:
            rid = len(self.keys_seen) + 1
            self.keys_seen[key] = rid
            c0 = self.t
            self.t += int(compile_ms * MS)
            self._emit(ev.Compile(c0, self.t, "host", self.step, key=key, recipe_id=rid,
                                  node_count=len(summary.nodes), src=src,
                                  reason=reason or ("first compile" if rid == 1 else "input 0 shape changed (32, 64) -> (16, 64)"),
                                  peak_bytes=1 << 20, clusters=1, graph=summary))
        rid = self.keys_seen[key]
        self.launch(rid, key, device_ms, summary, stream)
        self._emit(ev.MarkStep(t_ms, self.t, "host", self.step, src=src, pending_nodes=self.pending))
        self.pending = 0
        self.step += 1

    def launch(self, rid, key, device_ms, summary=None, stream=0):
        self.next_launch += 1
        lid = self.next_launch
        self.t += 5_000
        self._emit(ev.Launch(self.t, self.t, "host", self.step, launch_id=lid, recipe_id=rid, key=key,
                             stream=stream, graph=summary))
        start = max(self.t + 50_000, self.dev_free.get(stream, 0))
        end = start + int(device_ms * MS)
        self.dev_free[stream] = end
        # the executor thread emits when it finishes, with the step current at that time
        self._emit(ev.DeviceExecution(start, end, f"hpu:{stream}", self.step, launch_id=lid, recipe_id=rid,
                                      key=key, node_count=len(summary.nodes) if summary else 0))
        self.last_launch_end = end

    def sync(self, reason=".item()", src="train.py:22", stream=0):
        """The host waits for the device (a .item() / .cpu() / synchronize)."""
        s0 = self.t
        self.t = max(self.t, self.dev_free.get(stream, 0)) + 10_000
        self._emit(ev.HostSync(s0, self.t, "host", self.step, reason=reason, src=src))

    def fallback(self, op="aten::digamma", dtypes=("BFloat16",), src="train.py:12"):
        s0 = self.t
        self.t += 200_000
        self._emit(ev.CPUFallback(s0, self.t, "host", self.step, op=op, dtypes=dtypes, src=src))

    def memory(self, in_use, max_in_use, limit=96 << 30):
        self._emit(ev.MemorySample(self.t, self.t, "host", self.step, in_use=in_use, max_in_use=max_in_use,
                                   limit=limit))

    def capture(self, graph_id=1, n_ops=20, key="cap", device_ms=2.0):
        b = self._emit(ev.CaptureBegin(self.t, self.t, "host", self.step, graph_id=graph_id, src="train.py:30"))
        self.op(n=n_ops)
        self.mark_step(key=key, device_ms=device_ms, compile_ms=10.0)
        self.t += 100_000
        self._emit(ev.CaptureEnd(b.t_start, self.t, "host", self.step, graph_id=graph_id, recipes=1,
                                 node_count=n_ops, src="train.py:30"))

    def replay(self, graph_id=1, key="cap", device_ms=2.0, host_us=40):
        r0 = self.t
        self.t += int(host_us * 1000)
        self.launch(self.keys_seen.get(key, 99), key, device_ms)
        self._emit(ev.Replay(r0, self.t, "host", self.step, graph_id=graph_id, recipes=1, src="train.py:31"))
        self._emit(ev.MarkStep(self.t, self.t + 1000, "host", self.step, src="train.py:32", pending_nodes=0))
        self.t += 1000
        self.step += 1


def host_bound_loop(steps=6, item_every=1, shapes_vary=False) -> list:
    """A lazy training loop where tracing (100 ops x 50 us = 5 ms) dwarfs device work (1 ms)."""
    s = Sim()
    for i in range(steps):
        s.op(n=100, each_us=50)
        key = "k0" if not (shapes_vary and i % 2) else f"k{i}"
        s.mark_step(key=key, device_ms=1.0)
        s.memory(10 << 20, (10 + i) << 20)
        if item_every and i % item_every == 0:
            s.sync(".item()")
    return s.events


def device_bound_loop(steps=6) -> list:
    """Few ops, long device work: the host waits at each .item()."""
    s = Sim()
    for i in range(steps):
        s.op(n=10, each_us=20)
        s.mark_step(key="k0", device_ms=20.0, compile_ms=5.0)
    s.sync("torch.hpu.synchronize()")
    return s.events


def test_sim_emits_every_kind_in_order():
    evs = host_bound_loop(steps=3)
    kinds = {e.kind for e in evs}
    assert {"OpAccumulated", "GraphBuilt", "CacheLookup", "Compile", "Launch", "DeviceExecution",
            "MarkStep", "HostSync", "MemorySample"} <= kinds
    assert sum(1 for e in evs if isinstance(e, ev.Compile)) == 1
    assert all(e.t_end >= e.t_start for e in evs)


def test_sim_device_runs_after_launch():
    evs = host_bound_loop(steps=2)
    launches = {e.launch_id: e for e in evs if isinstance(e, ev.Launch)}
    for d in (e for e in evs if isinstance(e, ev.DeviceExecution)):
        assert d.t_start >= launches[d.launch_id].t_end
