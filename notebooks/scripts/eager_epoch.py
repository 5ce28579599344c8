"""One epoch of notebook 00's training loop in eager mode: run by 00_start_here (section 5) in a fresh
process with PT_HPU_LAZY_MODE=0, which the bridge reads once, before its import. Prints its counts
as one JSON object, the last line of its output (hpu_lab/lab/fresh.py). Edit it and re-run the cell."""
import json, torch, torch.nn.functional as F
import hpu_lab, hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.lab.data import MNISTLike
from hpu_lab.lab.examples import Net    # seed 000's model, as in notebook 00

torch.manual_seed(0)
model = Net().to("hpu")
optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)
with ev.Collector() as c:             # the training loop above, unchanged
    for data, target in loader:
        data, target = data.to("hpu"), target.to("hpu")
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data), target)
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
print(json.dumps({"lazy_mode": hpu_lab.config.lazy_mode(), "ops": len(c.of(ev.OpAccumulated)),
                  "launches": len(c.of(ev.Launch)), "loss": round(loss.item(), 3)}))
