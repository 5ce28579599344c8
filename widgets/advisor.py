"""The panel's Advice tab: the advisor's rules (hpu_lab.perfmodel.advice, which the
``habana_perf_tool`` command also runs on a trace file) applied to a section's live events, the
window measured on the panels' clock (widgets.timeline.verdict: the Gaudi clock by default).

    advise(events)  # ["host-bound: device idle 78% of the step time ... consider HPU Graphs (seed 000)", ...]
"""
from __future__ import annotations

from typing import List, Sequence

from hpu_lab import events as ev
from hpu_lab.perfmodel.advice import (EVERY_STEP_FRACTION, RULES, VALUE_READS, constant_recompiles,  # noqa: F401
                                      cpu_fallbacks, data_dependent_syncs, errors, other_recompiles,
                                      shape_recompiles, value_read_syncs)
from hpu_lab.perfmodel import advice as _rules

from .timeline import verdict


def host_or_device_bound(events: Sequence[ev.Event]) -> List[str]:
    """The rule set's verdict rule, measured on the panels' clock."""
    return _rules.host_or_device_bound(list(events), verdict)


def advise(events: Sequence[ev.Event]) -> List[str]:
    """Every rule's advice, in RULES order."""
    return _rules.advise(events, verdict)


def advice_html(events: Sequence[ev.Event]) -> str:
    import html
    tips = advise(events)
    if not tips:
        return "<p>Nothing to flag in this section.</p>"
    return "<ul>" + "".join(f"<li style='margin:4px 0'>{html.escape(t)}</li>" for t in tips) + "</ul>"
