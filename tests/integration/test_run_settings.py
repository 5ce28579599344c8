"""Settings kernels read when they run (integration/run_settings.py).

torch's default dtype is an input of a graph: the same ops with the same arguments give float32 or
float64 (a factory, an integer tensor's true division) as ``torch.set_default_dtype`` says. A
Gaudi's lazy graph holds the resolved dtypes; here the meta cache and the recipe cache are keyed by
the default too. Before, a recipe cached under float32 and found again under float64 ran, returned
float64 where it had predicted float32, and the next sync raised an OutputMismatch."""
import threading

import pytest
import torch

import hpu_lab  # noqa: F401
from hpu_lab import core as htcore
from hpu_lab.runtime import executor
from hpu_lab.compiler.recipe import GraphKey
from hpu_lab.compiler import disk_cache
from hpu_lab import events as ev


class _HeldDevice:
    """Stream 0 held back: a host function in stream order waits on a gate, so a graph launched
    inside is launched but not run until the gate opens (``open_after``, from a timer thread; always
    on leaving)."""

    def __enter__(self):
        self.gate, self._timer = threading.Event(), None
        executor.stream(0).submit_fn(self.gate.wait)
        return self

    def open_after(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self.gate.set)
        self._timer.start()

    def __exit__(self, *exc):
        if self._timer is not None:
            self._timer.cancel()
        self.gate.set()


def _matmuls(a, b, set_precision, restore):
    """CPU's float32 a @ b before and after a precision setting: whether the setting changes the
    numbers depends on the CPU (oneDNN sends a float32 matmul through bf16 only where the CPU has a
    fast bf16 path, e.g. AMX; a Xeon with avx512_bf16 but no AMX computes the same float32 product)."""
    before = a @ b
    set_precision()
    try:
        after = a @ b
    finally:
        restore()
    return before, after


def _skip_unless_it_changes_the_product(before, after, setting):
    if torch.equal(before, after):
        pytest.skip(f"{setting} does not change a float32 matmul on this CPU (no bf16 matmul path in "
                    "oneDNN here), so no result can show which setting the device ran under")


def _ops(device):
    return (torch.ones(3, device=device) * 0.1,
            torch.arange(3, device=device) / 3,
            torch.full((2,), 1.0 / 3, device=device))


def test_the_same_ops_after_a_new_default_dtype_give_cpus_dtypes_and_values():
    before = torch.get_default_dtype()
    try:
        for dt in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dt)
            got = _ops("hpu")
            htcore.mark_step()
            for h, c in zip(got, _ops("cpu")):
                h = h.cpu()
                assert h.dtype == c.dtype == dt and torch.equal(h, c)
    finally:
        torch.set_default_dtype(before)


def test_graph_keys_and_their_disk_text_differ_by_the_default_dtype():
    sigs, outs, hashes = (("aten::ones.default", (), ()),), ((0, 0),), (1,)
    a, b = GraphKey(sigs, outs, hashes, torch.float32), GraphKey(sigs, outs, hashes, torch.float64)
    assert a != b and a == GraphKey(sigs, outs, hashes, torch.float32)
    assert disk_cache.key_text(a) != disk_cache.key_text(b)


def test_the_recompile_says_the_default_dtype_changed():
    before = torch.get_default_dtype()
    try:
        with ev.Collector() as c:
            for dt in (torch.float32, torch.float64):
                torch.set_default_dtype(dt)
                y = torch.ones(5, device="hpu") * 0.25       # a graph no other test builds
                htcore.mark_step()
                y.cpu()
    finally:
        torch.set_default_dtype(before)
    reasons = [e.reason for e in c.of(ev.Compile)]
    assert reasons[-1] == "torch's default dtype changed float32 -> float64 (torch.set_default_dtype)"


def test_a_replay_under_another_default_dtype_is_refused_naming_it_and_the_runtime_recovers():
    """Known limit: the device reads the default dtype when a recipe runs (on a Gaudi a captured
    graph keeps the dtypes it was built with). A replay after torch.set_default_dtype is refused at
    once, naming both dtypes, with nothing launched: the outputs keep their values; set back, the
    same graph replays. (Before, it ran, the next sync raised an OutputMismatch, and the outputs
    stayed unreadable until a replay under the old default.)"""
    import pytest
    from hpu_lab.graphs import HPUGraph
    from hpu_lab.graphs._common import HPUGraphError
    before = torch.get_default_dtype()
    x = torch.ones(4, device="hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x * 0.3 + torch.arange(4, device="hpu") / 7
    inner = (torch.arange(4, device="hpu") / 7).float()      # float32 out whatever the default
    g.capture_end()
    expected = torch.ones(4) * 0.3 + torch.arange(4) / 7
    x.add_(1)
    try:
        torch.set_default_dtype(torch.float64)
        with pytest.raises(HPUGraphError, match=r"captured while torch's default dtype was float32, and it is now "
                                                r"float64 \(torch.set_default_dtype\)"):
            g.replay()
    finally:
        torch.set_default_dtype(before)
    assert torch.equal(y.cpu(), expected)                     # the capture's values: nothing ran
    assert torch.equal(inner.cpu(), torch.arange(4) / 7)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 2.0) * 0.3 + torch.arange(4) / 7)


def test_ops_traced_before_a_new_default_keep_their_dtypes():
    """The default changes between two ops of one step: each op gives CPU's dtype for the default it
    was traced under (before, the graph was keyed and run under the new default, and the sync raised
    an OutputMismatch blaming the shape inference). The ops traced before are launched as their own
    graph, and its GraphBuilt names the trigger."""
    before = torch.get_default_dtype()
    try:
        with ev.Collector() as c:
            x = torch.ones(3, device="hpu") * 0.1
            torch.set_default_dtype(torch.float64)
            z = torch.arange(3, device="hpu") / 3
            htcore.mark_step()
            got_x, got_z = x.cpu(), z.cpu()
    finally:
        torch.set_default_dtype(before)
    assert got_x.dtype == torch.float32 and torch.equal(got_x, torch.ones(3) * 0.1)
    assert got_z.dtype == torch.float64 and torch.equal(got_z, torch.arange(3) / torch.tensor(3.0, dtype=torch.float64))
    assert [e.trigger for e in c.of(ev.GraphBuilt)] == ["torch.set_default_dtype", "mark_step"]


def test_a_launched_graph_the_device_has_not_run_keeps_its_dtypes():
    """The device is held back (a host function in stream order waits on a gate), so the graph is
    launched but not run when the default changes. set_default_dtype waits for the device: the graph
    runs under the default it was built with. Before, it ran under the new one and the sync raised."""
    before = torch.get_default_dtype()
    with _HeldDevice() as held:
        y = torch.full((4,), 1.0 / 3, device="hpu") * 3
        htcore.mark_step()
        held.open_after(0.2)                    # opens after set_default_dtype would have returned
        try:
            torch.set_default_dtype(torch.float64)
            assert held.gate.is_set()           # it waited for the device
        finally:
            torch.set_default_dtype(before)
    got = y.cpu()
    assert got.dtype == torch.float32 and torch.equal(got, torch.full((4,), 1.0 / 3) * 3)


def test_an_unchanged_or_refused_default_launches_nothing():
    from hpu_lab.lazy import S
    before = torch.get_default_dtype()
    x = torch.ones(2, device="hpu") + 1
    torch.set_default_dtype(before)                      # no change: nothing launched
    import pytest
    with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
        torch.set_default_dtype(torch.int32)             # torch's own refusal, untouched
    assert torch.get_default_dtype() is before and len(S.pg.nodes) == 2
    htcore.mark_step()
    assert torch.equal(x.cpu(), torch.full((2,), 2.0))


def test_a_matmul_launched_before_a_new_matmul_precision_gives_cpus_numbers():
    """'medium' lets a float32 matmul go through bf16 on this CPU: a matmul traced under 'highest'
    must give CPU's 'highest' numbers even if the device runs it after the change (before: other
    numbers, silently)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    before = torch.get_float32_matmul_precision()
    _skip_unless_it_changes_the_product(
        *_matmuls(a, b, lambda: torch.set_float32_matmul_precision("medium"),
                  lambda: torch.set_float32_matmul_precision(before)),
        'torch.set_float32_matmul_precision("medium")')
    with _HeldDevice() as held:
        y = a.to("hpu") @ b.to("hpu")
        htcore.mark_step()
        held.open_after(0.2)
        try:
            torch.set_float32_matmul_precision("medium")
            got = y.cpu()                        # still "medium" when the device could run it
            medium = a @ b
        finally:
            torch.set_float32_matmul_precision(before)
    assert torch.equal(got, a @ b)
    assert not torch.equal(medium, a @ b)        # the setting matters here (checked above)


def test_each_setter_launches_the_ops_traced_before_it_changes_anything():
    det = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    prec = torch.get_float32_matmul_precision()
    try:
        with ev.Collector() as c:
            x = torch.ones(2, device="hpu") * 3
            torch.use_deterministic_algorithms(det[0], warn_only=det[1])      # unchanged: nothing
            torch.use_deterministic_algorithms(not det[0])
            y = x + 1
            torch.set_float32_matmul_precision(prec)                           # unchanged: nothing
            torch.set_float32_matmul_precision("high" if prec != "high" else "highest")
            htcore.mark_step()
    finally:
        torch.use_deterministic_algorithms(det[0], warn_only=det[1])
        torch.set_float32_matmul_precision(prec)
    assert [e.trigger for e in c.of(ev.GraphBuilt)] == ["torch.use_deterministic_algorithms",
                                                        "torch.set_float32_matmul_precision"]
    assert torch.equal(y.cpu(), torch.full((2,), 4.0))
    assert torch.use_deterministic_algorithms.__wrapped__ is not None


def test_the_deprecated_set_default_tensor_type_settles_too():
    import warnings
    before = torch.get_default_dtype()
    try:
        with ev.Collector() as c, warnings.catch_warnings():
            warnings.simplefilter("ignore")          # torch: set_default_tensor_type is deprecated
            x = torch.ones(3, device="hpu") * 0.1
            torch.set_default_tensor_type("torch.DoubleTensor")
            z = torch.ones(3, device="hpu") * 0.1
            htcore.mark_step()
            got_x, got_z = x.cpu(), z.cpu()
            torch.set_default_tensor_type(torch.FloatTensor)
    finally:
        torch.set_default_dtype(before)
    assert got_x.dtype == torch.float32 and got_z.dtype == torch.float64
    assert torch.equal(got_x, torch.ones(3) * 0.1)
    assert [e.trigger for e in c.of(ev.GraphBuilt)][0] == "torch.set_default_tensor_type"


def test_a_default_changed_behind_torchs_setters_fails_loudly_at_the_sync():
    """torch._C._set_default_dtype skips the setters' settling: a graph the device runs after it
    gives other dtypes than it was built with, and the sync refuses them, saying what happened."""
    import pytest
    from hpu_lab.runtime.executor import OutputMismatch
    before = torch.get_default_dtype()
    with _HeldDevice() as held:
        y = torch.full((3,), 1.0 / 7, device="hpu") * 7
        htcore.mark_step()
        try:
            torch._C._set_default_dtype(torch.float64)
            held.gate.set()
            with pytest.raises(OutputMismatch, match="built while torch's default dtype was float32, and it ran "
                                                     "after the default became float64 without torch.set_default_dtype"):
                y.cpu()
        finally:
            held.gate.set()
            torch.set_default_dtype(before)
    z = torch.full((3,), 1.0 / 7, device="hpu") * 7                 # the runtime goes on
    assert torch.equal(z.cpu(), torch.full((3,), 1.0 / 7) * 7)


def _bits(t):
    # compared as integers: with denormals flushed, this thread reads a denormal as zero (.item(),
    # torch.equal), so the floats cannot tell
    return t.view(torch.int32)


def test_the_device_flushes_denormals_as_torch_set_flush_denormal_last_said():
    """torch.set_flush_denormal sets the calling thread's mode only: the device's worker kept the
    mode of the thread that created it, so after a change the same product was flushed to zero on
    one side and not on the other, silently. Now each launch carries the mode."""
    x = torch.full((8,), 1e-39)
    try:
        for mode in (True, False, True):
            if not torch.set_flush_denormal(mode):
                pytest.skip("this CPU cannot flush denormals")
            got = (x.to("hpu") * 0.5).cpu()
            assert torch.equal(_bits(got), _bits(x * 0.5)), mode
            assert bool((_bits(got) == 0).all()) is mode
    finally:
        torch.set_flush_denormal(False)


def test_a_product_traced_before_set_flush_denormal_keeps_its_denormals():
    """Traced, not yet launched, when the mode changes: on CPU the product was computed then, so the
    device must run it with the old mode (set_flush_denormal launches it first, and waits)."""
    x = torch.full((8,), 1e-39)
    y = x.to("hpu") * 0.5
    try:
        if not torch.set_flush_denormal(True):
            pytest.skip("this CPU cannot flush denormals, so the mode cannot change the product")
        htcore.mark_step()
        got = y.cpu()
    finally:
        torch.set_flush_denormal(False)
    assert torch.equal(_bits(got), _bits(x * 0.5)) and bool((_bits(got) != 0).all())


def test_a_conv_traced_before_onednn_is_switched_gives_cpus_numbers():
    """With oneDNN off, a CPU conv2d takes another algorithm (other last bits): a conv traced under
    one mode gives CPU's numbers for that mode, whichever way the knob is set afterwards (the
    flags() context manager, or the assignment)."""
    import warnings
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, 16, 16, generator=g), torch.randn(16, 8, 3, 3, generator=g)
    conv = torch.nn.functional.conv2d
    on = conv(x, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # torch: TF32 on oneDNN needs an Intel GPU
        with torch.backends.mkldnn.flags(enabled=False):
            off = conv(x, w)
    if torch.equal(on, off):
        # a CPU (or build) where oneDNN's convolution and ATen's own give the same bits, or oneDNN
        # does not take this conv at all (e.g. not built with it, or an aarch64 build without ACL)
        pytest.skip("switching oneDNN off does not change this float32 conv2d on this CPU, so no "
                    "result can show which mode the device ran it in")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False):
            y_off = conv(x.to("hpu"), w.to("hpu"))      # traced with oneDNN off, launched after
    y_on = conv(x.to("hpu"), w.to("hpu"))
    # torch's own test helpers freeze the knobs' assignment (disable_global_flags), and an earlier
    # test may have imported them: allowed here as flags() allows itself
    with getattr(torch.backends, "__allow_nonbracketed_mutation")():
        torch.backends.mkldnn.enabled = False              # the assignment: it settles too
        try:
            htcore.mark_step()
            got_off, got_on = y_off.cpu(), y_on.cpu()
        finally:
            torch.backends.mkldnn.enabled = True
    assert torch.equal(got_off, off) and torch.equal(got_on, on)



def test_a_matmul_traced_before_onednns_fp32_precision_changes_gives_cpus_numbers():
    """torch.backends.mkldnn.matmul.fp32_precision = "bf16" sends a CPU float32 matmul through bf16."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    before = torch.backends.mkldnn.matmul.fp32_precision

    def set_bf16():
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"

    def restore():
        torch.backends.mkldnn.matmul.fp32_precision = before
    _skip_unless_it_changes_the_product(*_matmuls(a, b, set_bf16, restore),
                                        'torch.backends.mkldnn.matmul.fp32_precision = "bf16"')
    ieee = a @ b
    y = a.to("hpu") @ b.to("hpu")
    set_bf16()
    try:
        bf16 = a @ b
        htcore.mark_step()
        got = y.cpu()
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = before
    assert not torch.equal(ieee, bf16) and torch.equal(got, ieee)
