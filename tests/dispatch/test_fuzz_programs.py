"""Random straight-line programs on hpu vs CPU, lazy and eager (generator: ``fuzz_programs.py``).

A few seeded programs of each kind here; ``make fuzz`` runs many. A failure prints the shrunk program."""
import pytest

import fuzz_modules
import fuzz_programs as fz

SEEDS = range(12)
MODULE_SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_cpu(seed):
    msg = fz.report(seed, fz.generate(seed, 30))
    assert msg is None, msg


@pytest.mark.parametrize("seed", MODULE_SEEDS)
def test_random_module_program_matches_cpu(seed):
    """Modules with state (BatchNorm, dropout, RNNs), discarded outputs, statistics read mid-step,
    save/load round trips (fuzz_modules.py)."""
    msg = fz.report(seed, fuzz_modules.generate(seed, 30))
    assert msg is None, msg


def test_a_differing_program_is_shrunk_to_the_lines_that_matter(monkeypatch):
    """The shrinker on a planted difference: hpu's sin answers cos (via the CPU reference here)."""
    lines = fz.generate(5, 20) + ["t99 = torch.sin(torch.ones(3, device=dev))"]
    real_run = fz.run

    def run(lines, dev):
        if dev == "cpu":
            lines = [ln.replace("torch.sin(torch.ones", "torch.cos(torch.ones") for ln in lines]
        return real_run(lines, dev)
    monkeypatch.setattr(fz, "run", run)
    msg = fz.report(5, lines)
    assert msg is not None and "t99" in msg
    assert msg.count("\n    ") == 2          # the seed line and the planted line are all that is left
