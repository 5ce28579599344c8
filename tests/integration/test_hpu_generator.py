"""``torch.Generator(device="hpu")`` (hpu_lab/integration/generator.py) and the device-module API torch's own code
calls (``torch.hpu.device``, ``_utils._get_device_index``, ``_get_generator``; torch.serialization,
``torch.random.fork_rng``, ``torch.utils.checkpoint``). Before, the generator raised "You should
register `PrivateUse1HooksInterface` ... `getNewGenerator`", and ``torch.hpu.device`` was missing."""
import copy
import pickle

import pytest
import torch
from torch.utils.checkpoint import checkpoint

DRAWS = {
    "randn": lambda g: torch.randn(5, device="hpu", generator=g),
    "rand": lambda g: torch.rand(2, 3, device="hpu", generator=g),
    "randint-int32": lambda g: torch.randint(0, 1 << 16, (6,), dtype=torch.int32, device="hpu", generator=g),
    "randperm": lambda g: torch.randperm(7, device="hpu", generator=g),
    "normal_": lambda g: torch.empty(4, device="hpu").normal_(2.0, 3.0, generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((8,), 0.3, device="hpu"), generator=g),
    "multinomial": lambda g: torch.multinomial(torch.arange(1., 6.).to("hpu"), 3, generator=g),
}


def test_a_new_hpu_generator():
    g = torch.Generator(device="hpu")
    assert g.device == torch.device("hpu", 0)
    assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    assert type(torch.Generator()) is torch._C.Generator and torch.Generator("cpu").device.type == "cpu"
    assert g.initial_seed() == torch.Generator().initial_seed()
    with pytest.raises(RuntimeError, match="hpu:1"):
        torch.Generator(device="hpu:1")


@pytest.mark.parametrize("name", list(DRAWS))
def test_seeded_it_draws_what_the_default_generator_draws(name):
    """Seeded with s, an hpu generator draws what hpu's default generator draws after
    torch.manual_seed(s) (the numbers CPU draws), and leaves the default generator alone."""
    torch.manual_seed(11)
    state = torch.hpu.get_rng_state()
    g = torch.Generator(device="hpu").manual_seed(1234)
    got = [DRAWS[name](g).cpu() for _ in range(2)]
    assert torch.equal(torch.hpu.get_rng_state(), state)
    torch.manual_seed(1234)
    want = [DRAWS[name](None).cpu() for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    cpu = torch.Generator().manual_seed(1234)
    cpu_draw = {"randperm": lambda: torch.randperm(7, generator=cpu)}.get(name)
    if cpu_draw is not None:
        assert torch.equal(got[0], cpu_draw())


def test_state_copy_and_pickle_keep_the_device():
    g = torch.Generator(device="hpu").manual_seed(5)
    torch.randn(3, device="hpu", generator=g)
    for h in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert h.device.type == "hpu" and torch.equal(h.get_state(), g.get_state())
        assert torch.equal(torch.randn(4, device="hpu", generator=h).cpu(),
                           torch.randn(4, device="hpu", generator=copy.deepcopy(g)).cpu())
    s = g.get_state()
    a = torch.rand(3, device="hpu", generator=g).cpu()
    g.set_state(s)
    assert torch.equal(torch.rand(3, device="hpu", generator=g).cpu(), a)


def test_device_module_api_torch_calls():
    assert torch.get_device_module("hpu") is torch.hpu
    for d in (0, "hpu", "hpu:0", torch.device("hpu", 0)):
        assert torch.hpu._utils._get_device_index(d, optional=True) == 0
        with torch.hpu.device(d):
            pass
    assert torch.hpu._utils._get_device_index(torch.device("cpu"), allow_cpu=True) == -1
    with pytest.raises(ValueError, match="Expected a hpu device, but got: cpu"):
        torch.hpu._utils._get_device_index("cpu")
    with pytest.raises(RuntimeError, match="one device"):
        torch.hpu.device(1)
    with torch.hpu.device_of(torch.ones(1).to("hpu")), torch.hpu.device_of(torch.ones(1)):
        pass
    assert torch.hpu._get_generator(torch.device("hpu")) is torch.default_generator


def test_fork_rng_restores_hpu_draws():
    torch.manual_seed(5)
    with torch.random.fork_rng(device_type="hpu"):
        torch.randn(3, device="hpu")
    after = torch.randn(2, device="hpu").cpu()
    torch.manual_seed(5)
    assert torch.equal(after, torch.randn(2, device="hpu").cpu())


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recomputes_dropout_as_cpu(reentrant):
    """torch.utils.checkpoint keeps and restores the device's RNG state (through torch.hpu.device and
    get/set_rng_state): the recomputed dropout mask is the first one, as on CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)

    def run(dev):
        torch.manual_seed(1)
        m = copy.deepcopy(model).to(dev)
        xx = x.detach().to(dev).requires_grad_()
        out = checkpoint(m, xx, use_reentrant=reentrant)
        out.sum().backward()
        return [out.detach().cpu(), xx.grad.cpu()] + [p.grad.cpu() for p in m.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run("hpu"), run("cpu")))
