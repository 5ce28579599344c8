"""The router (hpu_lab/dispatch/route.py): the path each op takes, the special-op table's handles, and the
named writers of the lazy state."""
import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import config, events as ev, lazy
from hpu_lab.dispatch import host_ops, route, special_ops, view_ops

aten = torch.ops.aten


@pytest.mark.parametrize("func, handler", [
    (aten.copy_.default, special_ops.copy_),
    (aten.native_dropout.default, special_ops.native_dropout),
    (aten.normal_.default, special_ops.random_inplace),
    (aten.squeeze_.default, view_ops.inplace_view),
    (aten.view.default, view_ops.view_op),
    (aten.add.out, special_ops.out_variant),
    (aten.add_.Tensor, lazy.lazy_op),
    (aten.add.Tensor, lazy.functional_op),
])
def test_each_op_has_its_path(func, handler):
    assert route.resolve(func) is handler


def test_data_dependent_and_random_ops_run_on_the_host(collect):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    h = x.to("hpu")
    assert torch.equal(torch.nonzero(h).cpu(), torch.nonzero(x))
    syncs = collect.of(ev.HostSync)
    assert any("data-dependent op aten::nonzero" in s.reason for s in syncs)


def test_a_registered_handler_takes_the_op_until_its_handle_is_removed():
    seen = []

    def handler(func, args, kwargs):
        seen.append(func)
        return lazy.functional_op(func, args, kwargs)

    x = torch.randn(5)
    h = route.register_special(aten.sin.default, handler)
    try:
        y = torch.sin(x.to("hpu")).cpu()
    finally:
        h.remove()
    assert seen == [aten.sin.default] and torch.equal(y, torch.sin(x))
    assert route.resolve(aten.sin.default) is lazy.functional_op
    torch.sin(x.to("hpu")).cpu()
    assert len(seen) == 1


def test_removing_a_handle_puts_back_the_handler_it_replaced():
    def mine(func, args, kwargs):
        raise AssertionError("not called")

    h = route.register_special(aten.copy_.default, mine)
    assert route.resolve(aten.copy_.default) is mine
    h.remove()
    assert route.resolve(aten.copy_.default) is special_ops.copy_
    x = torch.arange(4.0)
    assert torch.equal(x.to("hpu").cpu(), x)


def test_the_fallback_checks_follow_the_configuration(monkeypatch):
    monkeypatch.setenv("PT_HPU_PLACE_ON_CPU", "aten::sin")
    config.reload()
    assert route.resolve(aten.sin.default) is not lazy.functional_op      # the fallback check
    monkeypatch.delenv("PT_HPU_PLACE_ON_CPU")
    config.reload()
    assert route.resolve(aten.sin.default) is lazy.functional_op


def test_a_capture_must_provide_the_protocol():
    with pytest.raises(TypeError, match="lacks what a capture provides"):
        lazy.begin_capture(object())
    assert lazy.S.capture is None


def test_tracing_restores_the_pending_graph_and_mode():
    x = torch.ones(3, device="hpu")
    y = x + 1                                # pending
    before, n = lazy.S.pg, len(lazy.S.pg)
    flushes = []
    with lazy.tracing(lambda t: None, lambda *a: flushes.append(a)) as pg:
        assert lazy.S.pg is pg and pg is not before and not lazy.S.eager
        htcore.mark_step()
    assert lazy.S.pg is before and len(before) == n > 0 and len(flushes) == 1
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_host_op_results_are_device_tensors():
    r = host_ops.to_hpu_result(torch.arange(6).reshape(2, 3).t())
    assert r.device.type == "hpu" and torch.equal(r.cpu(), torch.arange(6).reshape(2, 3).t())
