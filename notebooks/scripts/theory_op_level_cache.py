"""Notebook 01, section 7: the 5-op forward pass three times in an eager-mode process
(PT_HPU_LAZY_MODE=0): the recipe cache is asked once per op."""
from theory_prelude import ev, forward, report, w1, w2, x

with ev.Collector() as c:
    for i in range(3):
        y = forward(x, w1, w2)
lookups = c.of(ev.CacheLookup)
report(lookups=len(lookups), hits=sum(e.hit for e in lookups), compiles=len(c.of(ev.Compile)))
