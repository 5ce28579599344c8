"""Object-model patterns: the same training script, written the way the wrappers people put on Gaudi
write it (accelerate's ``prepare(model, optimizer, data)``, Lightning Fabric's ``setup``, ZeRO-1/2's
flat buffers bound with ``.data =``, DeepSpeed's ``p.data.view(torch.uint8)``), in plain torch.

Each pattern is ``fn(dev, step_end) -> (values, facts)``: ``values`` the tensors it ends with (on the
host), ``facts`` what it observed of the object model (which objects are the same, which memory
is shared, versions, hook calls). tests/dispatch/test_object_model.py runs every pattern on "cpu" and on
"hpu" and requires both to be equal: values bit for bit, facts exactly.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 3


class Net(nn.Module):
    def __init__(self, tied=False):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.lin = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.tanh(self.lin(self.emb(x))))


def _batches(n=STEPS):
    g = torch.Generator().manual_seed(7)
    return [(torch.randint(0, 11, (4, 5), generator=g), torch.randint(0, 11, (4, 5), generator=g))
            for _ in range(n)]


def _loss(model, x, y, dev):
    return F.cross_entropy(model(x.to(dev)).flatten(0, 1), y.to(dev).flatten())


def _train(model, opt, dev, step_end, batches=None):
    for x, y in batches or _batches():
        opt.zero_grad()
        _loss(model, x, y, dev).backward()
        opt.step()
        step_end()


def _host(ts):
    return [t.detach().to("cpu") for t in ts]


def _same_objects(a, b) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


# ---------------------------------------------------------------- the wrappers' orders

def accelerate_prepare(dev, step_end):
    """accelerate's README: the optimizer is made on the CPU model, then ``prepare`` moves the model."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    before = list(model.parameters())

    def prepare(model, opt, data):                 # what Accelerator.prepare does with them
        model.to(dev)
        return model, opt, [(x.to(dev), y.to(dev)) for x, y in data]

    model, opt, data = prepare(model, opt, _batches())
    _train(model, opt, dev, step_end, data)
    facts = {"params kept": _same_objects(before, model.parameters()),
             "optimizer holds the model's": _same_objects(opt.param_groups[0]["params"], model.parameters()),
             "all are Parameters": all(isinstance(p, nn.Parameter) for p in model.parameters()),
             "state keyed by them": all(p in opt.state for p in model.parameters())}
    return _host(model.parameters()), facts


def fabric_setup(dev, step_end):
    """Lightning Fabric: ``setup(model, optimizer)`` after a CPU step: the model moves, then the
    optimizer's state tensors are moved one by one (``_optimizer_to_device``)."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _train(model, opt, "cpu", lambda: None, _batches(1))        # state made on the CPU
    model.to(dev)
    for p, state in opt.state.items():
        for k, v in state.items():
            if isinstance(v, torch.Tensor) and k != "step":
                state[k] = v.to(dev)
    _train(model, opt, dev, step_end)
    facts = {"optimizer holds the model's": _same_objects(opt.param_groups[0]["params"], model.parameters()),
             "state keyed by the model's": all(p in opt.state for p in model.parameters()),
             "state on the model's device": all(opt.state[p]["exp_avg"].device == p.device
                                                for p in model.parameters())}
    return _host(model.parameters()) + _host(opt.state[p]["exp_avg_sq"] for p in model.parameters()), facts


def optimizer_after_move(dev, step_end):
    torch.manual_seed(0)
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, dev, step_end)
    return _host(model.parameters()), {"optimizer holds the model's": _same_objects(
        opt.param_groups[0]["params"], model.parameters())}


def grads_hooks_versions_across_move(dev, step_end):
    """What ``_apply`` keeps on CUDA: the Parameter, its ``.grad`` object, ``_version``,
    ``requires_grad`` (a frozen layer stays frozen) and the hooks registered before the move."""
    torch.manual_seed(0)
    model = Net()
    model.lin.bias.requires_grad_(False)
    calls = {"pre": 0, "post": 0}
    model.head.weight.register_hook(lambda g: calls.__setitem__("pre", calls["pre"] + 1))
    model.lin.weight.register_post_accumulate_grad_hook(lambda p: calls.__setitem__("post", calls["post"] + 1))
    x, y = _batches(1)[0]
    _loss(model, x, y, "cpu").backward()                    # grads made on the CPU
    grads = [p.grad for p in model.parameters()]
    versions = [p._version for p in model.parameters()]
    model.to(dev)
    facts = {"grads kept": all(g is p.grad for g, p in zip(grads, model.parameters())),
             "grads moved": all(p.grad is None or p.grad.device == p.device for p in model.parameters()),
             "versions": versions == [p._version for p in model.parameters()],
             "frozen stays frozen": not model.lin.bias.requires_grad}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    _train(model, opt, dev, step_end)
    facts["hooks after the move"] = dict(calls)
    return _host(model.parameters()), facts


def overwrite_on_conversion(dev, step_end):
    """``torch.__future__.set_overwrite_module_params_on_conversion(True)``: new Parameters, as on
    CUDA (an optimizer made before then holds the old ones, which get no gradient)."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = list(model.parameters())
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        model.to(dev)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    _train(model, opt, dev, step_end)
    return _host(model.parameters()), {"params kept": _same_objects(before, model.parameters())}


# ---------------------------------------------------------------- ZeRO's flat buffers

def zero_flat_buffer(dev, step_end):
    """ZeRO-1/2: the parameters are bound into one flat buffer (``p.data = flat.narrow(...)``), the
    optimizer steps an fp32 partition of it, and the updated partition is copied back into the flat
    buffer, which every parameter sees."""
    torch.manual_seed(0)
    model = Net().to(dev)
    params = list(model.parameters())
    flat = torch.cat([p.data.reshape(-1) for p in params])
    offsets, off = [], 0
    for p in params:
        p.data = flat.narrow(0, off, p.numel()).view_as(p)
        offsets.append(off)
        off += p.numel()
    master = nn.Parameter(flat.detach().clone())
    opt = torch.optim.Adam([master], lr=0.01)
    ptr_ok = all(p.data_ptr() == flat.data_ptr() + o * flat.element_size() for p, o in zip(params, offsets))
    for x, y in _batches():
        model.zero_grad()
        _loss(model, x, y, dev).backward()
        master.grad = torch.cat([p.grad.reshape(-1) for p in params])
        opt.step()
        flat.copy_(master.detach())                 # every parameter sees its new values
        step_end()
    with torch.no_grad():
        params[0].mul_(0.5)                         # and a write through a parameter reaches flat
    facts = {"params are views of flat": ptr_ok,
             "same storage": all(p.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
                                 for p in params),
             "write through a parameter seen in flat": torch.equal(
                 flat.narrow(0, 0, params[0].numel()).view_as(params[0]).cpu(), params[0].detach().cpu())}
    return _host(params) + [flat.cpu()], facts


def params_views_of_flat(dev, step_end):
    """Parameters made as views of one flat buffer (apex/Megatron contiguous parameters)."""
    torch.manual_seed(0)
    shapes = [(6, 4), (6,), (3, 6)]
    flat = torch.randn(sum(torch.Size(s).numel() for s in shapes)).to(dev)
    params, off = [], 0
    for s in shapes:
        n = torch.Size(s).numel()
        params.append(nn.Parameter(flat[off:off + n].view(s)))
        off += n
    opt = torch.optim.SGD(params, lr=0.1)
    for x, _ in _batches():
        opt.zero_grad()
        h = torch.tanh(x[:, :4].float().to(dev) @ params[0].t() + params[1])
        (h @ params[2].t()).square().mean().backward()
        opt.step()
        step_end()
    return _host(params) + [flat.cpu()], {"flat sees the steps": torch.equal(flat[:24].view(6, 4).cpu(),
                                                                            params[0].detach().cpu())}


def data_view_uint8(dev, step_end):
    """DeepSpeed looks at the parameters' bytes (``p.data.view(torch.uint8)``) and writes them."""
    torch.manual_seed(0)
    model = Net().to(dev)
    sums = [int(p.data.view(torch.uint8).sum()) for p in model.parameters()]
    with torch.no_grad():
        model.lin.weight.data.view(torch.uint8)[0, :4] = 0              # the first float is +0.0 now
        model.lin.bias.data.view(torch.int32)[1] += 1                    # the next float up
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, dev, step_end)
    facts = {"byte sums": sums,
             "same address": all(p.data.view(torch.uint8).data_ptr() == p.data_ptr() for p in model.parameters())}
    return _host(model.parameters()) + _host(p.data.view(torch.int16) for p in model.parameters()), facts


# ---------------------------------------------------------------- the module's own conversions

def weight_tying(dev, step_end):
    torch.manual_seed(0)
    model = Net(tied=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model.to(dev)
    _train(model, opt, dev, step_end)
    return _host(model.parameters()), {"tied": model.head.weight is model.emb.weight,
                                       "count": len(list(model.parameters())),
                                       "optimizer holds the model's": _same_objects(
                                           opt.param_groups[0]["params"], model.parameters())}


def swap_tensors(dev, step_end):
    """``torch.utils.swap_tensors`` of each parameter with a new one on the device, and
    ``set_swap_module_params_on_conversion(True)`` for the next move."""
    torch.manual_seed(0)
    model = Net(tied=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = list(model.parameters())
    for p in before:
        torch.utils.swap_tensors(p, nn.Parameter(p.detach().to(dev) * 1.0))
    _train(model, opt, dev, step_end)
    other = Net()
    kept = list(other.parameters())
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        other.to(dev)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    facts = {"swapped in place": _same_objects(before, model.parameters()),
             "tied": model.head.weight is model.emb.weight,
             "moved": all(p.device.type == dev for p in model.parameters()),
             "swap on conversion keeps": _same_objects(kept, other.parameters())}
    return _host(model.parameters()) + _host(other.parameters()), facts


def state_dict_round_trip(dev, step_end):
    torch.manual_seed(0)
    model = Net(tied=True).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _train(model, opt, dev, step_end, _batches(1))
    sd, osd = model.state_dict(), copy.deepcopy(opt.state_dict())
    aliases = sd["emb.weight"].data_ptr() == model.emb.weight.data_ptr()
    torch.manual_seed(1)
    again = Net(tied=True).to(dev)
    kept = list(again.parameters())
    again.load_state_dict(sd)
    opt2 = torch.optim.Adam(again.parameters(), lr=0.01)
    opt2.load_state_dict(osd)
    _train(again, opt2, dev, step_end)
    assigned = Net(tied=True).to(dev)
    assigned.load_state_dict({k: v.clone() for k, v in sd.items()}, assign=True)
    facts = {"state dict aliases the params": aliases,
             "load keeps the params": _same_objects(kept, again.parameters()),
             "tied after load": again.head.weight is again.emb.weight,
             "assign=True replaces": not _same_objects(kept, assigned.parameters()),
             "loaded state on the device": all(s["exp_avg"].device.type == dev for s in opt2.state.values())}
    return _host(again.parameters()) + _host(assigned.parameters()), facts


def deepcopy_module(dev, step_end):
    torch.manual_seed(0)
    model = Net(tied=True).to(dev)
    clone = copy.deepcopy(model)
    opt = torch.optim.SGD(clone.parameters(), lr=0.1)
    _train(clone, opt, dev, step_end)
    facts = {"tied in the copy": clone.head.weight is clone.emb.weight,
             "nothing shared": all(p is not q and p.data_ptr() != q.data_ptr()
                                   for p, q in zip(model.parameters(), clone.parameters())),
             "copies are Parameters": all(isinstance(p, nn.Parameter) for p in clone.parameters())}
    return _host(model.parameters()) + _host(clone.parameters()), facts


def functional_call(dev, step_end):
    """``torch.func.functional_call`` with parameters of its own (torch.func training loops)."""
    torch.manual_seed(0)
    model = Net().to(dev)
    own = model.lin.weight
    params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    for x, y in _batches():
        out = torch.func.functional_call(model, params, (x.to(dev),))
        loss = F.cross_entropy(out.flatten(0, 1), y.to(dev).flatten())
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                p.sub_(0.1 * g)
        step_end()
    facts = {"model untouched": all(p.grad is None for p in model.parameters()),
             "module's own params back": model.lin.weight is own}
    return _host(params.values()) + _host(model.parameters()), facts


def moved_twice(dev, step_end):
    """Moved, moved again, back to the host and out again, and through dtypes, with the optimizer
    made before any of it."""
    torch.manual_seed(0)
    model = Net(tied=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = list(model.parameters())
    model.to(dev)
    model.to(dev)
    model.to("cpu")
    model.to(dev)
    model.double()
    model.float()
    _train(model, opt, dev, step_end)
    return _host(model.parameters()), {"params kept": _same_objects(before, model.parameters()),
                                       "tied": model.head.weight is model.emb.weight,
                                       "float32": all(p.dtype == torch.float32 for p in model.parameters())}


def parameter_class(dev, step_end):
    """Code that rebuilds a parameter from its class (accelerate's ``set_module_tensor_to_device``:
    ``type(p)(value, requires_grad=...)``), wraps one again (``nn.Parameter(p)``) and reads its class."""
    torch.manual_seed(0)
    model = Net().to(dev)
    p = model.lin.weight
    cls = type(p)
    value = torch.full_like(p, 0.5)
    rebuilt = cls(value, requires_grad=p.requires_grad)
    wrapped = nn.Parameter(p)
    frozen = cls(p.detach().clone(), requires_grad=False)
    model.lin.weight = rebuilt
    facts = {"class is a Parameter class": issubclass(cls, nn.Parameter),
             "rebuilt is of the class": type(rebuilt) is cls,
             "rebuilt is a Parameter": isinstance(rebuilt, nn.Parameter),
             "rebuilt aliases its value": rebuilt.data_ptr() == value.data_ptr(),
             "rebuilt on the device": rebuilt.device.type == dev,
             "wrapped is of the class": type(wrapped) is cls and wrapped is not p,
             "wrapped aliases": wrapped.data_ptr() == p.data_ptr(),
             "frozen": (type(frozen) is cls, frozen.requires_grad),
             ".data is a plain tensor": not isinstance(p.data, nn.Parameter),
             "detach is a plain tensor": not isinstance(p.detach(), nn.Parameter),
             "deepcopy keeps the class": type(copy.deepcopy(p)) is cls,
             "repr": repr(p).split("\n")[0],
             "registered": model.lin.weight is rebuilt and rebuilt in set(model.parameters())}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, opt, dev, step_end)
    return _host(model.parameters()) + _host([wrapped, frozen]), facts


PATTERNS = {f.__name__: f for f in (
    accelerate_prepare, fabric_setup, optimizer_after_move, grads_hooks_versions_across_move,
    overwrite_on_conversion, zero_flat_buffer, params_views_of_flat, data_view_uint8, weight_tying,
    swap_tensors, state_dict_round_trip, deepcopy_module, functional_call, moved_twice, parameter_class)}
