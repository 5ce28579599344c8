"""The device worker computes with the launching thread's intra-op thread count (runtime/executor.py).

A CPU reduction's partial sums depend on how many threads share it, and ``torch.set_num_threads(n)``
sets the count for the calling thread only (OpenMP's per-thread setting): the stream's worker,
started before the call, kept the count it started with, and a large sum on "hpu" then differed
from the same sum on CPU in the last bits."""
import pytest
import torch

import hpu_lab  # noqa: F401


def test_a_sum_on_hpu_matches_cpu_after_the_thread_count_changes():
    torch.manual_seed(0)
    a = torch.randn(1 << 22)
    before = torch.get_num_threads()
    (a.to("hpu") * 2).sum().cpu()             # the worker has run with the count it started with
    other = 1 if before > 1 else 2
    try:
        torch.set_num_threads(other)
        cpu = a.sum()
        torch.set_num_threads(before)
        # the premise: this sum depends on the count (each thread sums a part). A CPU build whose
        # reduction does not split by thread count gives one sum, and nothing below could fail
        if torch.equal(cpu, a.sum()):
            pytest.skip(f"a float32 sum gives the same bits with {before} and {other} threads on this "
                        "CPU build, so no result can show which count the device ran with")
        torch.set_num_threads(other)
        assert torch.equal(a.to("hpu").sum().cpu(), cpu)
        torch.set_num_threads(before)         # and back: the worker follows again
        assert torch.equal(a.to("hpu").sum().cpu(), a.sum())
    finally:
        torch.set_num_threads(before)
