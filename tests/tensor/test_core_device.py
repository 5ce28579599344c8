"""The "hpu" device in stock PyTorch: factories, copies, printing, modules, save/load, seeds."""
import io

import pytest
import torch
import torch.nn as nn

import hpu_lab
import hpu_lab.core as htcore
from hpu_lab.tensor import HPUTensor


def test_device_module_is_registered():
    assert torch.hpu.is_available()
    assert torch.hpu.device_count() == 1
    assert torch.hpu.current_device() == 0
    assert htcore.hpu is torch.hpu
    torch.hpu.synchronize()
    assert torch.device("hpu").type == "hpu"


@pytest.mark.parametrize("make, expected", [
    (lambda d: torch.zeros(2, 3, device=d), None),
    (lambda d: torch.ones(2, 3, dtype=torch.int64, device=d), None),
    (lambda d: torch.full((4,), 3.5, device=d), None),
    (lambda d: torch.arange(7, device=d), None),
    (lambda d: torch.arange(0, 1, 0.25, device=d), None),
    (lambda d: torch.eye(3, device=d), None),
    (lambda d: torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=d), None),
    (lambda d: torch.linspace(0, 1, 5, device=d), None),
])
def test_factories_match_cpu(make, expected):
    h = make("hpu")
    assert isinstance(h, HPUTensor) and h.device == torch.device("hpu", 0)
    assert torch.equal(h.cpu(), make("cpu"))


def test_empty_has_shape_dtype_and_device():
    e = torch.empty(2, 5, dtype=torch.bfloat16, device="hpu")
    assert e.shape == (2, 5) and e.dtype == torch.bfloat16 and e.device.type == "hpu"


def test_random_factories_reproduce_cpu_for_a_seed():
    torch.manual_seed(3)
    cpu = [torch.randn(5), torch.rand(2, 2), torch.randint(0, 9, (6,))]
    torch.manual_seed(3)
    hpu = [torch.randn(5, device="hpu"), torch.rand(2, 2, device="hpu"), torch.randint(0, 9, (6,), device="hpu")]
    for c, h in zip(cpu, hpu):
        assert torch.equal(c, h.cpu())


def test_copies_item_tolist_and_print():
    c = torch.tensor([[1.5, -2.0], [3.0, 4.25]])
    h = c.to("hpu")
    assert torch.equal(h.to("cpu"), c) and torch.equal(h.cpu(), c)
    assert h[1, 1].item() == 4.25
    assert h.tolist() == c.tolist()
    assert repr(h) == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]], device='hpu:0')"
    assert str(h * 1) == repr(h * 1)
    assert torch.ones(2).hpu().device.type == "hpu" and torch.ones(2).to("hpu").is_hpu


def test_repr_shows_grad_fn_and_dtype():
    x = torch.ones(2, device="hpu", requires_grad=True)
    assert repr(x * 2) == "tensor([2., 2.], device='hpu:0', grad_fn=<MulBackward0>)"
    assert "dtype=torch.bfloat16" in repr(torch.ones(2, dtype=torch.bfloat16, device="hpu"))


def test_cpu_operands_of_hpu_ops():
    # as the Gaudi bridge does, a CPU operand is copied to the device (tests/runtime/test_compat_transfers.py)
    assert (torch.ones(2, device="hpu") + torch.ones(2)).device.type == "hpu"
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2).add_(torch.ones(2, device="hpu"))      # a CPU tensor written by an hpu op
    # a 0-dim CPU tensor is a scalar, as on CUDA
    assert (torch.ones(2, device="hpu") * torch.tensor(3.0)).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        torch.ones(2, device="hpu").numpy()


def test_module_to_parameters_autograd_and_no_grad():
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    mh = nn.Linear(4, 3).to("hpu")
    mh.load_state_dict(m.state_dict())
    assert all(isinstance(p, HPUTensor) and isinstance(p, nn.Parameter) or p.device.type == "hpu"
               for p in mh.parameters())
    x = torch.randn(5, 4)
    m(x).pow(2).sum().backward()
    mh(x.to("hpu")).pow(2).sum().backward()
    for p, ph in zip(m.parameters(), mh.parameters()):
        assert torch.allclose(p.grad, ph.grad.cpu(), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        assert not (mh.weight * 2).requires_grad
    t = torch.ones(3, device="hpu").requires_grad_()
    assert t.requires_grad and t.is_leaf
    p = nn.Parameter(torch.ones(2, device="hpu"))
    assert p.requires_grad


def test_state_dict_save_load_round_trip():
    m = nn.Linear(3, 2).to("hpu")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)                      # weights_only=True: torch's own rebuild function
    assert sd["weight"].device.type == "hpu"
    m_cpu = nn.Linear(3, 2)
    m_cpu.load_state_dict({k: v.cpu() for k, v in sd.items()})
    assert torch.equal(m_cpu.weight, m.weight.detach().cpu())
    m2 = nn.Linear(3, 2).to("hpu")
    m2.load_state_dict(sd)
    assert torch.equal(m2.bias.detach().cpu(), m.bias.detach().cpu())


def test_deepcopy_and_clone():
    import copy
    m = copy.deepcopy(nn.Linear(2, 2).to("hpu"))
    assert m.weight.device.type == "hpu"
    a = torch.arange(4.0).to("hpu")
    b = a.clone()
    b.add_(1)
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [1, 2, 3, 4]


def test_deepcopy_of_a_pending_tensor_is_a_copy_with_memory_of_its_own():
    # torch's deepcopy copied the wrapper's slots onto its clone: the copy held a copy of the
    # original's Storage object (a pending value off its graph: reading it raised AttributeError;
    # its memory was freed without being allocated)
    import copy
    import gc
    gc.collect()                                    # an earlier test's cyclic garbage is not freed inside
    base = torch.hpu.memory_allocated()
    a = torch.ones(1000, device="hpu") + 1          # pending in lazy mode
    w = nn.Linear(3, 3).to("hpu").weight
    b, w2 = copy.deepcopy(a), copy.deepcopy(w)
    a.add_(5)
    htcore.mark_step()
    assert b[:2].tolist() == [2, 2] and a[:2].tolist() == [7, 7]
    assert isinstance(w2, nn.Parameter) and w2.requires_grad and torch.equal(w2.cpu(), w.cpu())
    del a, b, w, w2
    gc.collect()
    assert torch.hpu.memory_allocated() == base


def test_dtype_conversions():
    h = torch.arange(5).to("hpu")
    assert h.to(torch.float32).dtype == torch.float32
    assert torch.equal(h.float().to(torch.bfloat16).cpu(), torch.arange(5).float().to(torch.bfloat16))
    assert h.to("cpu", torch.float64).dtype == torch.float64
