"""Two training steps of notebook 06's loop: run by 06_accelerating_training (section 1) in a fresh
process, once with PT_HPU_LAZY_MODE=0 and once with 1 (the bridge reads it once, before its import).
Prints its counts as one JSON object, the last line of its output (hpu_lab/lab/fresh.py). Edit it and
re-run the cell."""
import json, torch, torch.nn.functional as F
import hpu_lab, hpu_lab.core as htcore
from hpu_lab import events as ev
from hpu_lab.lab.data import MNISTLike
from hpu_lab.lab.examples import Net      # seed 000's model, as in notebook 06

torch.manual_seed(0)
model = Net().to("hpu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(MNISTLike(train=True), batch_size=200)
with ev.Collector() as c:             # notebook 06's train_epoch, on two batches
    for (data, target), _ in zip(loader, range(2)):
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(data.to("hpu")), target.to("hpu"))
        loss.backward()
        htcore.mark_step()
        optimizer.step()
        htcore.mark_step()
    final = loss.item()
launches = c.of(ev.Launch)
print(json.dumps({"lazy_mode": hpu_lab.config.lazy_mode(), "launches": len(launches),
                  "largest_graph": max(sum(n.op not in ("input", "output", "view") for n in e.graph.nodes) for e in launches),
                  "fused_clusters": sum(len({n.cluster for n in e.graph.nodes if n.cluster >= 0}) for e in launches),
                  "loss": final}))
