"""Three training steps of a small MLP of the given width: run by 07_general_optimizations (section 8)
as separate processes with PT_HPU_RECIPE_CACHE_CONFIG=<folder>,<delete>,<max MB>, to show the disk
recipe cache across runs. Prints what its recipe lookups found as one JSON object, the last line of
its output. Usage: python cached_training.py <width>. Edit it and re-run the cells."""
import json, sys, threading
import torch, torch.nn as nn, torch.nn.functional as F
import hpu_lab, hpu_lab.core as htcore
from hpu_lab.compiler import disk_cache
from hpu_lab import events as ev

width = int(sys.argv[1])
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, 10)).to("hpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with ev.Collector() as c:
    for step in range(3):
        x, t = torch.randn(64, 1, 28, 28).to("hpu"), torch.randint(0, 10, (64,)).to("hpu")
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), t)
        loss.backward()
        htcore.mark_step()
        opt.step()
        htcore.mark_step()
    final = round(loss.item(), 4)
lookups = c.of(ev.CacheLookup)
print(json.dumps({"launches": len(c.of(ev.Launch)), "compiles": len(c.of(ev.Compile)),
                  "memory_hits": sum(e.hit for e in lookups if e.source == "memory"),
                  "disk_hits": sum(e.hit for e in lookups if e.source == "disk"),
                  "disk_misses": sum(not e.hit for e in lookups if e.source == "disk"),
                  "writer_threads": [t.name for t in threading.enumerate() if t.name == "hpu_lab-disk-cache"],
                  "loss": final}), flush=True)
disk_cache.flush_writes()
