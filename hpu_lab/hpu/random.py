"""``habana_frameworks.torch.hpu.random``: seeds and generator state.

On Gaudi the device has a generator of its own. hpu_lab draws every random number of an "hpu"
tensor on the host, from torch's default (CPU) generator, in program order, so that a run on "hpu"
gives the numbers of the same program on CPU. The hpu generator therefore *is* torch's default
generator: seeding one seeds the other (on Gaudi, ``torch.manual_seed`` also seeds the hpu generator,
and ``torch.hpu.manual_seed`` leaves the CPU one alone).
"""
from __future__ import annotations

import torch

__all__ = ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed",
           "manual_seed_all", "seed", "seed_all", "initial_seed", "default_generators"]

default_generators = (torch.default_generator,)


def _check_device(device) -> None:
    idx = device if isinstance(device, int) else torch.device(device).index
    if idx not in (None, 0):
        raise RuntimeError("hpu get_rng_state/set_rng_state supports only device 0")


def get_rng_state(device="hpu") -> torch.Tensor:
    _check_device(device)
    return torch.default_generator.get_state()


def set_rng_state(new_state, device="hpu") -> None:
    _check_device(device)
    torch.default_generator.set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(0)]


def set_rng_state_all(new_states) -> None:
    if len(new_states) != 1:
        raise RuntimeError("hpu set_rng_state_all supports only states len of 1")
    set_rng_state(new_states[0], 0)


def manual_seed(seed):
    # the generator itself, not torch.manual_seed: that one calls torch.hpu.manual_seed_all back
    return torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    manual_seed(seed)


def seed() -> int:
    return torch.default_generator.seed()


def seed_all() -> None:
    torch.default_generator.seed()


def initial_seed() -> int:
    return torch.default_generator.initial_seed()
