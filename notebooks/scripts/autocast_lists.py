"""One forward under torch.autocast("hpu", dtype=torch.bfloat16), run by 06_accelerating_training
(section 4) in a fresh process: the bridge reads PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST and
PT_HPU_AUTOCAST_FP32_OPS_LIST (files, one op a line) once, at import. Prints the lists it read, the
dtype each op ran in and the ops that fell back to the CPU, as one JSON object, the last line of its
output (hpu_lab/lab/fresh.py). Edit it and re-run the cell."""
import json, torch
import hpu_lab, hpu_lab.core as htcore
from hpu_lab.kernels import amp
from hpu_lab import events as ev

torch.manual_seed(0)
x, w = torch.randn(8, 16).to("hpu"), torch.randn(4, 16).to("hpu")
with ev.Collector() as c, torch.autocast("hpu", dtype=torch.bfloat16):
    y = {"linear": torch.nn.functional.linear(x, w),        # on the default lower-precision list
         "matmul": torch.matmul(x, w.t()),                  # on it too
         "digamma": torch.digamma(x.abs() + 1)}             # on no list: runs in its input's dtype
    htcore.mark_step()
lists = amp.lists()
print(json.dumps({"lower_precision_list": sorted(lists["lower"]), "fp32_list_length": len(lists["fp32"]),
                  "dtypes": {k: str(v.dtype).replace("torch.", "") for k, v in y.items()},
                  "fallbacks": [[e.op, list(e.dtypes)] for e in c.of(ev.CPUFallback)]}))
