"""Notebook 01, section 2: the 5-op forward pass in an eager-mode process (PT_HPU_LAZY_MODE=0)."""
from theory_prelude import ev, forward, hpu_lab, report, w1, w2, x

with ev.Collector() as c:
    y = forward(x, w1, w2)
report(lazy_mode=hpu_lab.config.lazy_mode(), ops=len(c.of(ev.OpAccumulated)), launches=len(c.of(ev.Launch)))
