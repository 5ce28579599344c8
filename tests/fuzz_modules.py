"""Random module-level programs (``fuzz_programs.py``'s second kind): nn modules with side effects
and state, and torch.save/torch.load round trips, mixed with the tensor lines of the first kind.

The class of bug these find is a state change the graph does not see: BatchNorm's running
statistics updated only if the forward's output is used, a read of them mid-step seeing old
values, dropout's noise, an RNN's hidden state, a view that comes back from torch.load as an
independent tensor. So the lines here build modules (BatchNorm1d/2d, Dropout, LSTM, GRU, RNN and
their cells, Linear), apply them to fitting or existing tensors (keeping the output, or discarding
it), switch train/eval, read running statistics in the middle of a step (``.item()`` or a clone),
and round-trip tensors, views with their base, and module state dicts through torch.save/load
(``rt``: with a map_location that varies on hpu). Every module's parameters, gradients and buffers
are compared with CPU's at the end, as every tensor is.
"""
from __future__ import annotations

import torch

import fuzz_programs as fz

# module constructors, each with the shape of an input it takes: {c} channels/features
MODULES = [
    ("nn.BatchNorm1d({c}, momentum={mom})", [("{n}", "{c}"), ("{n}", "{c}", "{l}")]),
    ("nn.BatchNorm1d({c}, momentum=None)", [("{n}", "{c}")]),
    ("nn.BatchNorm2d({c}, momentum={mom})", [("{n}", "{c}", "{l}", "{l}")]),
    ("nn.Dropout({p})", [("{n}", "{c}"), ("{n}", "{c}", "{l}")]),
    ("nn.Linear({c}, {h})", [("{n}", "{c}"), ("{l}", "{n}", "{c}")]),
    ("nn.LSTM({c}, {h}, num_layers={layers}, bidirectional={bi}, dropout={rp})",
     [("{l}", "{n}", "{c}"), ("{l}", "{c}")]),
    ("nn.LSTM({c}, {h}, batch_first=True, proj_size={proj})", [("{n}", "{l}", "{c}")]),
    ("nn.GRU({c}, {h}, num_layers={layers}, bidirectional={bi}, dropout={rp})", [("{l}", "{n}", "{c}")]),
    ("nn.RNN({c}, {h}, nonlinearity='{nl}', batch_first=True)", [("{n}", "{l}", "{c}")]),
    ("nn.LSTMCell({c}, {h})", [("{n}", "{c}")]),
    ("nn.GRUCell({c}, {h})", [("{n}", "{c}")]),
    ("nn.RNNCell({c}, {h})", [("{n}", "{c}")]),
]
TAKE = ["", "[0]", "[1]", "[1][0]", "[1][1]", ".sum()"]     # which part of an output to keep


class ModuleGen(fz.Gen):
    """The tensor generator's lines, plus module and save/load lines (see the module docstring)."""

    def __init__(self, seed):
        super().__init__(seed)
        # module init and dropout noise come from torch's default generator: seeded in the first
        # line, which the shrinker keeps
        self.lines[0] += f"; torch.manual_seed({seed})"
        exec(self.lines[0], self.env)
        self.modules = 0

    def mods(self):
        return [k for k, v in self.env.items() if isinstance(v, torch.nn.Module) and k[0] == "m"]

    def propose(self):
        r = self.rng.random()
        if r < 0.45:
            return super().propose()
        new = f"t{self.n}"
        mods = self.mods()
        if r < 0.62 or not mods:
            return self.new_module(new)
        m = self.rng.choice(mods)
        a = self.pick()
        if r < 0.72 and a is not None:               # an existing module on an existing tensor
            return [f"{new} = {m}({a}){self.rng.choice(TAKE)}"], new
        if r < 0.78 and a is not None:               # ... its output discarded
            return [f"{m}({a})"], None
        if r < 0.83:                                  # running statistics read mid-step
            stat = self.rng.choice(["running_mean", "running_var"])
            if self.rng.random() < 0.5:
                return [f"s{self.n} = {m}.{stat}.sum().item()", f"{new} = torch.ones(2, device=dev) * s{self.n}"], new
            return [f"{new} = {m}.{stat}.clone()"], new
        if r < 0.87:
            return [f"{m}.{self.rng.choice(['train()', 'eval()', 'train()'])}"], None
        return self.save_load(new, m, a)

    def new_module(self, new):
        """A module and an input it takes (fresh), applied; the output kept or discarded."""
        rng = self.rng
        ctor, shapes = rng.choice(MODULES)
        v = dict(c=rng.choice([2, 3, 4]), h=rng.choice([3, 4]), n=rng.choice([2, 3, 5]), l=rng.choice([1, 3, 4]),
                 mom=rng.choice([0.1, 0.5]), p=rng.choice([0.2, 0.5]), layers=rng.choice([1, 2]),
                 bi=rng.random() < 0.4, rp=rng.choice([0.0, 0.0, 0.3]), proj=rng.choice([0, 2]),
                 nl=rng.choice(["tanh", "relu"]))
        shape = tuple(int(s.format(**v)) for s in rng.choice(shapes))
        m = f"m{self.modules}"
        self.modules += 1
        x = f"{new}in"
        lines = [f"{m} = {ctor.format(**v)}.to(dev)",
                 f"{x} = torch.randn({shape}, generator=g).to(dev)"]
        if rng.random() < 0.25:
            return lines + [f"{m}({x})"], x
        return lines + [f"{new} = {m}({x}){rng.choice(TAKE[:3])}"], new

    def save_load(self, new, m, a):
        variant = self.rng.randint(0, len(fz.MAP_LOCATIONS) - 1)
        r = self.rng.random()
        if r < 0.4 and a is not None:                 # a tensor with a view of it: they stay one storage
            return [f"{new}, {new}v = rt([{a}, {a}[..., :1]], {variant})", f"{new}v.mul_(3)"], new
        if r < 0.7:                                   # a module's state dict, put back
            return [f"{m}.load_state_dict(rt({m}.state_dict(), {variant}))"], None
        if a is not None:
            return [f"{new} = rt({{'x': {a}}}, {variant})['x']"], new
        return None

    def step(self):
        # the module's random init and dropout draws come from torch's default generator: keep it
        # where it was when a proposal is refused, as the tensor generator keeps ``g``
        state = torch.get_rng_state()
        n = len(self.lines)
        modules = self.modules
        super().step()
        if len(self.lines) == n:
            torch.set_rng_state(state)
            self.modules = modules


def generate(seed, length=25):
    """A module program of about ``length`` accepted steps, ending with a backward."""
    return fz.generate(seed, length, ModuleGen)
