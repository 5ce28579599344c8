"""The panel benchmark's method (hpu_lab/bench/panel.py): paired ABBA rounds and a verdict that says
"undecided" rather than a number the noise decided. Facts about the statistics, no timing."""
from hpu_lab.bench import panel


def test_rounds_alternate_which_kind_of_loop_goes_first():
    assert [panel.order(i, ("plain", "section")) for i in range(4)] == [
        ["plain", "section"], ["section", "plain"], ["plain", "section"], ["section", "plain"]]
    # with the bare recording too, the plain and section loops still swap places every round
    assert panel.order(1, ("plain", "section", "recording")) == ["recording", "section", "plain"]


def test_the_verdict_needs_the_whole_interval_of_the_median_on_one_side():
    tight_low = panel.summary([0.05, 0.06, 0.07, 0.06, 0.05, 0.07, 0.06, 0.05])
    tight_high = panel.summary([0.20, 0.22, 0.21, 0.19, 0.20, 0.23, 0.21, 0.22])
    spread = panel.summary([-0.07, 0.64, 0.21, 0.28, 0.57, 0.09, -0.02, 0.15])
    assert panel.verdict(tight_low) == "met" and panel.verdict(tight_high) == "not met"
    assert panel.verdict(spread) == "undecided"
    assert spread["lo"] <= spread["median"] <= spread["hi"] and spread["q1"] <= spread["median"] <= spread["q3"]


def test_overheads_are_paired_within_a_round():
    rows = [{"plain": {"wall": 2.0, "cpu": 4.0, "main_cpu": 1.0},
             "section": {"wall": 2.2, "cpu": 4.4, "main_cpu": 1.5, "cell": 2.6}},
            {"plain": {"wall": 4.0, "cpu": 4.0, "main_cpu": 1.0},
             "section": {"wall": 4.0, "cpu": 5.0, "main_cpu": 1.0, "cell": 5.0}}]
    o = panel.overheads(rows, "section")
    assert [round(x, 6) for x in o["wall"]] == [0.1, 0.0]
    assert [round(x, 6) for x in o["cpu"]] == [0.1, 0.25]
    assert [round(x, 6) for x in o["cell"]] == [0.3, 0.25]
