"""Notebook 01, section 4: ten calls of the chain under torch.compile in an eager-mode process
(PT_HPU_LAZY_MODE=0), re-timed on HPU_LAB_DEVICE's card by lab.step_times_of."""
from theory_chain import chain, chain_weights
from theory_prelude import ev, report, torch, x
from hpu_lab import lab

ws = chain_weights()
compiled_chain = torch.compile(chain, backend="hpu_backend")
compiled_chain(x, ws); torch.hpu.synchronize()          # compile outside the measurement
with ev.Collector() as c:
    for i in range(10):
        y = compiled_chain(x, ws)
    torch.hpu.synchronize()
t = lab.step_times_of(c.events, steps=10)               # on HPU_LAB_DEVICE's card: the notebook's
report(ops=len(c.of(ev.OpAccumulated)), graphs=len(c.of(ev.GraphBuilt)), compiles=len(c.of(ev.Compile)),
       launches=len(c.of(ev.Launch)), host_ms=t.host_ms, device_ms=t.device_ms)
