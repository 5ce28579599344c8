"""Notebook 01, section 3: seed 000's model under torch.compile(backend="hpu_backend"), the loss outside
it, in an eager-mode process (PT_HPU_LAZY_MODE=0)."""
from theory_prelude import F, ev, report, torch
from hpu_lab.lab.examples import Net    # the model of seed 000, verbatim

model = Net().to("hpu").eval()            # eval: no dropout noise
compiled = torch.compile(model, backend="hpu_backend")


def train_function(data, target):
    output = compiled(data)
    loss = F.nll_loss(output, target)     # not wrapped: eager
    return loss


batches = [(torch.randn(32, 1, 28, 28).to("hpu"), torch.randint(0, 10, (32,)).to("hpu")) for _ in range(5)]
with ev.Collector() as c:
    for data, target in batches:
        loss = train_function(data, target)
    loss_value = loss.item()
report(compiles=[e.node_count for e in c.of(ev.Compile)], launches=len(c.of(ev.Launch)),
       eager_ops=len(c.of(ev.OpAccumulated)), loss=round(loss_value, 3))
