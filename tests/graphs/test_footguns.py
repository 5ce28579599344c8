"""HPU Graph footguns: every documented trap fails loudly, or (where it cannot) is shown here.

As tinygrad's test_jit_footguns: the table first, then one test per trap. Every error names the op
and the user's line, and leaves the runtime usable (no capture left open, lazy work still runs).

| trap                                                        | what hpu_lab does                                          |
|-------------------------------------------------------------|------------------------------------------------------------|
| .item() / .cpu() / print / .tolist() / bool() in a capture  | "<op> is not supported during HPU Graph capturing (f:l)"  |
| data-dependent op (nonzero, boolean-mask indexing) in it    | "aten::nonzero is not supported during HPU Graph ..."     |
| CPU fallback in a capture (digamma on bfloat16)             | "cpu fallback is not supported during hpu graph capturing" |
| in-place update of a view in a capture (x[0] = ..., add_)  | "aten::copy_ is not supported ...: in-place update of a view" |
| graph API in eager mode (PT_HPU_LAZY_MODE=0)                | "HPU Graphs are supported in lazy mode only"               |
| replay with another input shape or dtype (basic APIs)       | ValueError naming the shapes, pointing to ModuleCacher     |
| non-tensor or keyword inputs to the basic APIs              | TypeError pointing to ModuleCacher                         |
| nested captures; replay or Event.record inside a capture    | error naming the graph being captured                      |
| replay of a graph never captured / abandoned                | error saying why the graph is empty                        |
| backward of an earlier call of a graphed callable           | error: its static buffers were overwritten                 |
| a CPU tensor updated then read in a capture (torch Adam's   | "aten::_local_scalar_dense (a host read of a CPU tensor    |
|   step count without capturable=True)                       |   that aten::add_ updated ...) is not supported ..."       |
| host data copied to the device inside the capture           | HPUGraphWarning: a constant of the graph (line named)      |
| sample arg without requires_grad, real input with           | warning: no gradient flows to it (as on Gaudi and CUDA)    |
| -- cannot be detected: frozen by design (shown below) --    |                                                            |
| Python scalars and control flow in the captured code        | replay repeats what the capture saw                        |
| a new tensor instead of copy_ into the static input         | replay still reads the static input                        |
| outputs of the basic API / wrap_in_hpu_graph                | overwritten by the next replay (same objects: G3, I1, I2)  |
| host data copied to the device inside the capture           | a constant of the graph (and warned, above)                |
"""
import pytest
import torch
import torch.nn as nn

import hpu_lab.core as htcore
from hpu_lab import config, lazy
from hpu_lab.graphs import HPUGraph, HPUGraphError

HERE = "test_footguns.py:"


def assert_usable():
    """No capture left open; lazy work and a new capture both still work."""
    assert lazy.S.capture is None
    a = torch.arange(3.0).to("hpu") * 2
    htcore.mark_step()
    assert a.tolist() == [0.0, 2.0, 4.0]
    x = torch.ones(2).to("hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x + 1
    g.capture_end()
    g.replay()
    assert y.tolist() == [2.0, 2.0]


def _capture_error(fn, match):
    x = torch.randn(4).to("hpu")
    g = HPUGraph()
    with pytest.raises(HPUGraphError, match=match) as err:
        with torch.hpu.graph(g):
            fn(x)
    assert HERE in str(err.value)                       # names the user's line
    with pytest.raises(HPUGraphError, match="abandoned"):
        g.replay()
    assert_usable()
    return str(err.value)


@pytest.mark.parametrize("sync,name", [
    (lambda x: (x * 2).sum().item(), ".item()"),
    (lambda x: (x * 2).cpu(), ".cpu()"),
    (lambda x: print(x * 2), "print"),
    (lambda x: (x * 2).tolist(), ".tolist()"),
    (lambda x: bool((x > 0).all()), "bool"),
])
def test_sync_during_capture(sync, name):
    msg = _capture_error(sync, "is not supported during HPU Graph capturing")
    assert msg.startswith(name)


@pytest.mark.parametrize("dynamic,op", [
    (lambda x: torch.nonzero(x), "aten::nonzero"),
    (lambda x: x[x > 0], "aten::index"),                 # boolean-mask indexing
    (lambda x: torch.unique(x), "aten::_unique2"),
])
def test_data_dependent_op_during_capture(dynamic, op):
    msg = _capture_error(dynamic, "is not supported during HPU Graph capturing")
    assert msg.startswith(op)


def test_cpu_fallback_during_capture():
    msg = _capture_error(lambda x: torch.digamma(x.to(torch.bfloat16)),
                         "cpu fallback is not supported during hpu graph capturing")
    assert "aten::digamma" in msg


@pytest.mark.parametrize("write,op", [
    (lambda x: x[1:3].copy_(torch.zeros(2).to("hpu")), "aten::copy_"),
    (lambda x: x[0].add_(1), "aten::add_"),
    (lambda x: x.view(2, 2)[0].mul_(3), "aten::mul_"),
])
def test_inplace_view_update_during_capture(write, op):
    msg = _capture_error(write, "in-place update of a view")
    assert msg.startswith(op)


def test_whole_tensor_inplace_updates_are_fine():
    x = torch.ones(4).to("hpu")
    g = HPUGraph()
    with torch.hpu.graph(g):
        x.mul_(2)                                      # the whole storage: an ordinary rebind
    g.replay()
    assert x.tolist() == [4.0] * 4


def test_graph_apis_in_eager_mode():
    config.set(PT_HPU_LAZY_MODE="0")
    for api in (HPUGraph, lambda: torch.hpu.make_graphed_callables(nn.Linear(2, 2).to("hpu"), (torch.ones(1, 2).to("hpu"),)),
                lambda: torch.hpu.wrap_in_hpu_graph(nn.Linear(2, 2)), lambda: torch.hpu.graph(None)):
        with pytest.raises(HPUGraphError, match="lazy mode only"):
            api()
    config.set(PT_HPU_LAZY_MODE="1")
    assert_usable()


def test_replay_with_another_shape_or_dtype():
    lin = nn.Linear(4, 2).to("hpu")
    f = torch.hpu.make_graphed_callables(lin, (torch.randn(8, 4).to("hpu"),))
    with pytest.raises(ValueError, match=r"tensor\(7, 4\).*captured with tensor\(8, 4\).*ModuleCacher"):
        f(torch.randn(7, 4).to("hpu"))
    with pytest.raises(ValueError, match="float64"):
        f(torch.randn(8, 4, dtype=torch.float64).to("hpu"))
    # a (1, 4) batch would broadcast silently into the static (8, 4) input: refused as well
    with pytest.raises(ValueError):
        f(torch.randn(1, 4).to("hpu"))
    x = torch.zeros(3).to("hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x + 1
    g.capture_end()
    with pytest.raises(ValueError, match="static shapes"):
        g.replayV2([x], [torch.zeros(4).to("hpu")])
    assert_usable()


def test_non_tensor_and_keyword_inputs():
    lin = nn.Linear(4, 2).to("hpu")
    with pytest.raises(TypeError, match="tuple of Tensors"):
        torch.hpu.make_graphed_callables(lin, (torch.randn(2, 4).to("hpu"), 3))
    f = torch.hpu.make_graphed_callables(lambda a, b: a * b, (torch.ones(2).to("hpu"), torch.ones(2).to("hpu")))
    with pytest.raises(TypeError, match="only tensors, positionally"):
        f(torch.ones(2).to("hpu"), 2.0)
    with pytest.raises(TypeError, match="keyword arguments"):
        f(torch.ones(2).to("hpu"), b=torch.ones(2).to("hpu"))
    with pytest.raises(TypeError, match="must be tensors"):
        torch.hpu.make_graphed_callables(lambda a: (a * 2, 3), (torch.ones(2).to("hpu"),))
    assert_usable()


def test_nested_capture_replay_and_event_record_inside_a_capture():
    other = HPUGraph()
    x = torch.ones(2).to("hpu")
    other.capture_begin()
    y = x * 3
    other.capture_end()
    for inside in (lambda: HPUGraph().capture_begin(), other.replay, lambda: torch.hpu.Event().record()):
        g = HPUGraph()
        g.capture_begin()
        with pytest.raises(HPUGraphError, match="captur"):
            inside()
        if lazy.S.capture is not None:                # a nested capture_begin leaves the outer one open
            g.capture_end()
    assert_usable()
    other.replay()
    assert y.tolist() == [3.0, 3.0]


def test_replay_of_an_empty_graph_says_why():
    HPUGraph().replay()             # never captured: the bridge's step marker, nothing launched
    with pytest.raises(HPUGraphError, match="no capture underway"):
        HPUGraph().capture_end()
    g = HPUGraph()
    with pytest.raises(ZeroDivisionError):
        with torch.hpu.graph(g):
            1 / 0
    with pytest.raises(HPUGraphError, match="abandoned: ZeroDivisionError"):
        g.replay()
    assert_usable()


def _adam_capture(**kw):
    torch.manual_seed(0)
    lin = nn.Linear(4, 2).to("hpu")
    opt = torch.optim.Adam(lin.parameters(), lr=0.1, **kw)
    x, t = torch.randn(3, 4).to("hpu"), torch.randn(3, 2).to("hpu")

    def step():
        opt.zero_grad(set_to_none=True)
        ((lin(x) - t) ** 2).mean().backward()
        opt.step()

    step()                                              # warm-up: the optimizer state exists
    htcore.mark_step()
    g = HPUGraph()
    with torch.hpu.graph(g):
        step()
    return g, lin, step


def test_host_state_updated_then_read_during_capture():
    """torch's Adam keeps its step count on the host: captured, replays would reuse one bias correction."""
    with pytest.raises(HPUGraphError, match=r"^aten::_local_scalar_dense \(a host read of a CPU tensor that "
                                            r"aten::\w+_ updated in place at test_footguns.py:\d+; .*"
                                            r"capturable=True\) is not supported during HPU Graph capturing"):
        _adam_capture()
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    assert _get_current_dispatch_mode() is None        # the capture's watcher is gone too
    assert_usable()
    # with capturable=True the step count lives on the device: replays equal the lazy steps
    g, lin, _ = _adam_capture(capturable=True)
    for _ in range(3):
        g.replay()
    torch.manual_seed(0)
    ref = nn.Linear(4, 2).to("hpu")
    opt = torch.optim.Adam(ref.parameters(), lr=0.1, capturable=True)
    x, t = torch.randn(3, 4).to("hpu"), torch.randn(3, 2).to("hpu")
    for _ in range(2 + 3):
        opt.zero_grad(set_to_none=True)
        ((ref(x) - t) ** 2).mean().backward()
        opt.step()
        htcore.mark_step()
    assert torch.allclose(lin.weight.detach().cpu(), ref.weight.detach().cpu(), atol=1e-6)


def test_backward_of_an_earlier_call_is_refused():
    lin = nn.Linear(3, 3).to("hpu")
    f = torch.hpu.make_graphed_callables(lin, (torch.randn(2, 3).to("hpu"),))
    first = f(torch.randn(2, 3).to("hpu"))
    second = f(torch.randn(2, 3).to("hpu"))            # overwrites the static activations
    with pytest.raises(HPUGraphError, match="backward of call 1"):
        first.sum().backward()
    second.sum().backward()                             # the latest call is fine
    assert lin.weight.grad is not None
    assert_usable()


# ---- frozen by design: a graph replays exactly what it captured

def test_python_scalars_and_control_flow_are_frozen():
    x = torch.ones(3).to("hpu")
    step = 1
    g = HPUGraph()
    g.capture_begin()
    y = x * step if step < 5 else x * 0
    g.capture_end()
    step = 10                                           # the replay does not see this
    g.replay()
    assert y.tolist() == [1.0] * 3


def test_a_new_tensor_is_not_the_static_input():
    x = torch.ones(3).to("hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x + 1
    g.capture_end()
    x = torch.full((3,), 5.0).to("hpu")                 # rebinds the name, not the static input
    g.replay()
    assert y.tolist() == [2.0] * 3


def test_outputs_are_overwritten_by_the_next_replay():
    x = torch.ones(2).to("hpu")
    g = HPUGraph()
    g.capture_begin()
    y = x * 2
    g.capture_end()
    kept = y
    x.copy_(torch.full((2,), 7.0))
    g.replay()
    assert kept is y and kept.tolist() == [14.0, 14.0]   # clone() what must survive a replay


def test_host_data_copied_inside_the_capture_is_a_constant():
    from hpu_lab.graphs import HPUGraphWarning
    g = HPUGraph()
    host = torch.tensor([1.0, 2.0])
    g.capture_begin()
    d = host.to("hpu")                                  # an H2D copy during the capture
    y = d * 10
    with pytest.warns(HPUGraphWarning, match=r"host data copied to the device during the capture \(at "
                                             r"test_footguns.py:\d+\) is a constant"):
        g.capture_end()
    g.replay()
    assert y.tolist() == [10.0, 20.0]
    host.mul_(100)                  # the graph holds the captured copy: the replay is refused
    with pytest.raises(HPUGraphError, match="has changed since"):
        g.replay()
