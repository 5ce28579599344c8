"""The habana_frameworks helpers real scripts call: utils.debug, utils.experimental (dynamic-shape
detection), hpu.random, TensorPacker, streams and events (issue 11, points 1, 2, 3 and 7)."""
import collections

import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import compat


def test_debug_helpers_answer_from_the_runtime(habana):
    import habana_frameworks.torch.utils.debug as htdebug
    x = torch.ones(4, device="hpu")
    (x * 2).sum().item()
    assert htdebug._get_jit_cache_size() >= 1
    htdebug._clear_jit_cache()
    assert htdebug._get_jit_cache_size() == 0
    assert htdebug.get_tensor_info(torch.ones(2)) is None
    ident, nbytes = htdebug.get_tensor_info(x)
    assert nbytes == 16 and htdebug.get_tensor_info(x[1:])[0] == ident      # a view: same storage
    assert htdebug._is_enabled_lazy_collectives() is False
    with pytest.raises(AttributeError, match="does not emulate habana_frameworks.torch.utils.debug._enable_permute_pass"):
        htdebug._enable_permute_pass(False)


class Dyn(torch.nn.Module):
    """A static child and a child with a data-dependent op (its output shape depends on values)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.pick = Pick()

    def forward(self, x):
        return self.pick(self.lin(x))


class Pick(torch.nn.Module):
    def forward(self, x):
        return x[x > 0] * 2


def test_detect_recompilation_auto_model(habana, tmp_path, capsys):
    import habana_frameworks.torch.utils.experimental as htexp
    net = Dyn()
    with torch.no_grad():
        net.lin.weight.copy_(torch.eye(4))
        net.lin.bias.zero_()
    model = htexp.detect_recompilation_auto_model(net.to("hpu"), csv_out=str(tmp_path / "out"))
    for batch, positives in ((8, 5), (8, 9), (8, 13), (6, 7)):     # a new count of selected values each step
        x = -torch.ones(batch * 4)
        x[:positives] = 1
        model(x.view(batch, 4).to("hpu"))
    rows, counts = model.analyse_dynamicity()
    by_step = collections.defaultdict(dict)
    for step, name, new_in, new_out, _cls, _loc, comment in rows:
        by_step[step][name] = comment
    # step 0 compiles everything for a new input; the batch-6 step recompiles for its new shape
    assert by_step[0]["Net"] == "Recompiled due to new input shape"
    assert by_step[3]["Net/lin"] == "Recompiled due to new input shape"
    # steps 1-2: same input shapes, yet Pick recompiles (its output size follows the values)
    for step in (1, 2):
        assert "Net/lin" not in by_step.get(step, {})
        assert by_step[step]["Net/pick"].startswith("Already processed input shape still recompiled")
        assert by_step[step]["Net"].endswith("Could be due to dynamic child")
    assert dict(counts)["Net/lin"] == 2
    out = capsys.readouterr().out
    assert "Recompiling modules" in out and (tmp_path / "out_1.csv").read_text().startswith("Step,")
    assert any("[DETECT_RECOMPILE_AUTO][Net]step:0 Found new input signature" in ln for ln in model.raw_logs())


def test_data_dynamicity_and_const_shape_dataloader(habana, capsys):
    import habana_frameworks.torch.utils.experimental as htexp
    data = [torch.zeros(n) for n in (3, 3, 5, 3)]
    hist = htexp.data_dynamicity(data)
    assert hist == {(3,): 3, (5,): 1} and "a little dynamicity" in capsys.readouterr().out
    dl = htexp.const_shape_dataloader(data, 2)
    assert [tuple(b.shape) for b in dl] == [(3,), (3,)]


def test_device_type_for_optimum(habana):
    import habana_frameworks.torch.utils.experimental as htexp
    assert htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi2 and htexp._is_fp16_supported()
    assert htexp.hpu.device_count() == 1


def test_hpu_random_seeds_the_generator_hpu_draws_from(habana):
    from habana_frameworks.torch.hpu import random as hpu_random
    hpu_random.manual_seed_all(123)
    a = torch.randn(5, device="hpu").cpu()
    state = hpu_random.get_rng_state()
    b = torch.randn(5, device="hpu").cpu()
    hpu_random.manual_seed(123)
    assert torch.equal(torch.randn(5, device="hpu").cpu(), a)
    hpu_random.set_rng_state(state)
    assert torch.equal(torch.randn(5, device="hpu").cpu(), b)
    torch.manual_seed(7)            # calls torch.hpu.manual_seed_all back: no recursion, same numbers
    assert torch.equal(torch.randn(5, device="hpu").cpu(), (torch.manual_seed(7), torch.randn(5))[1])
    assert hpu_random.initial_seed() == 7
    with pytest.raises(RuntimeError, match="only device 0"):
        hpu_random.get_rng_state(1)


def test_tensor_packer_round_trip(habana):
    from habana_frameworks.torch.hpu import TensorPacker
    x, y, z = torch.ones(1), torch.zeros(2), torch.arange(3)
    nested = {"x": x, "n": 3, "ys": [y, (z, "tag")], "od": collections.OrderedDict(a=x)}
    tensors, meta = TensorPacker().pack(nested)
    assert tensors == (x, y, z, x) or all(a is b for a, b in zip(tensors, (x, y, z, x)))
    back = TensorPacker().unpack(tensors, meta)
    assert back["n"] == 3 and back["ys"][1][1] == "tag" and back["ys"][0] is y and back["ys"][1][0] is z
    assert isinstance(back["od"], collections.OrderedDict) and back["od"]["a"] is x
    swapped = TensorPacker().unpack((y, y, y, y), meta)      # same template, other tensors
    assert swapped["x"] is y and swapped["n"] == 3


def test_streams_take_torch_stream_arguments(habana):
    s = torch.hpu.Stream()
    assert isinstance(s, torch.Stream) and s.device_type == torch.Stream("hpu").device_type
    same = torch.hpu.Stream(stream_id=s.stream_id, device_index=0, device_type=s.device_type)
    assert same == s and same.query()
    with pytest.raises(ValueError, match="does not exist"):
        torch.hpu.Stream(stream_id=99, device_index=0, device_type=s.device_type)
    with pytest.raises(ValueError, match="not hpu"):
        torch.hpu.Stream(stream_id=0, device_index=0, device_type=0)
    # a plain torch.Stream("hpu") selects hpu_lab's default stream
    with torch.hpu.stream(torch.Stream("hpu")):
        assert torch.hpu.current_stream() == torch.hpu.default_stream()
    with torch.hpu.stream(same):
        y = torch.ones(3, device="hpu") + 1
        htcore.mark_step()
        ev = torch.hpu.Event(enable_timing=True)
        ev.record()
    assert isinstance(ev, torch.Event)
    ev.synchronize()
    assert ev.query() and y.sum().item() == 6.0


def test_weight_sharing_module_keeps_tied_parameters(habana):
    from habana_frameworks.torch.core import weight_sharing
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    b.weight = a.weight
    weight_sharing.enable_weight_sharing()
    try:
        m = torch.nn.Sequential(a, b).to("hpu")
    finally:
        weight_sharing.disable_weight_sharing()
    assert m[0].weight is m[1].weight and m[0].weight.device.type == "hpu"
    assert len(list(m.parameters())) == 3
