"""Numbers in an op's arguments are keyed by type and bits, not by Python equality.

Python says 1 == 1.0 == True and 0.0 == -0.0; the meta cache and the recipe cache used to key
scalars by value, so after ``x + 1`` the op ``x + 1.0`` reused the int64 result type (a silent wrong
dtype), and ``amin(x, 0)`` then ``amin(x, None, keepdim=True)`` shared a key ([0] and [] flattened
alike, False == 0 and True == 1). Found by Intel's test_hpu_amax_amin run in file order."""
import torch

import hpu_lab  # noqa: F401 - registers the hpu device
from hpu_lab import lazy


def test_int_and_float_scalars_give_cpus_dtypes_in_any_order():
    x = torch.arange(4)
    h = x.to("hpu")
    for other in (1, 1.0, True, 1, 1.0):
        got = h + other
        want = x + other
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
        lazy.mark_step()


def test_negative_zero_is_its_own_constant():
    h = torch.ones(3).to("hpu")
    pos = (h * 0.0).cpu()
    neg = (h * -0.0).cpu()
    assert not torch.signbit(pos).any() and torch.signbit(neg).all()


def test_reduction_dims_and_keepdim_in_file_order():
    x = torch.randn(3, 4, 5, 6)
    h = x.to("hpu")
    for keepdim in (False, True):
        for dim in (None, -4, 0, 3):
            for op in (torch.amin, torch.amax):
                got = op(h, dim=dim, keepdim=keepdim)
                want = op(x, dim=dim, keepdim=keepdim)
                assert got.shape == want.shape and torch.equal(got.cpu(), want), (op, dim, keepdim)


def test_a_changed_constant_is_reported_as_the_user_wrote_it():
    from hpu_lab.compiler import reasons
    assert reasons._shown(lazy.scalar_sig(3)) == 3
    assert reasons._shown(lazy.scalar_sig(-0.5)) == -0.5
    assert reasons._shown(((lazy.scalar_sig(1), lazy.scalar_sig(2.0)),)) == ((1, 2.0),)


def test_a_recompile_reason_names_the_changed_float_as_written():
    from hpu_lab import events as ev
    x = torch.ones(4).to("hpu")
    with ev.Collector() as c:
        for k in (1.5, 2.5):
            (x * k).cpu()
    reasons = [e.reason for e in c.of(ev.Compile)]
    assert any("constant changed 1.5 -> 2.5" in r for r in reasons), reasons
