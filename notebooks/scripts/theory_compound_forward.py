"""Notebook 01, section 2: the 5-op forward pass in lazy mode with PT_HPU_MAX_COMPOUND_OP_SIZE=1."""
from theory_prelude import ev, forward, report, w1, w2, x

with ev.Collector() as c:
    y = forward(x, w1, w2)
report(ops=len(c.of(ev.OpAccumulated)), sizes=[g.node_count for g in c.of(ev.GraphBuilt)],
       compiled=[e.node_count for e in c.of(ev.Compile)])
