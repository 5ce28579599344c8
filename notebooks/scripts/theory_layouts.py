"""Notebook 01, section 5: a three-convolution net's recipe, with PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING
as the process was started (read once, at start-up): its permutes, and its device time on
HPU_LAB_DEVICE's card."""
import copy
from theory_prelude import ev, htcore, nn, report, torch
import hpu_lab.perfmodel as pm

torch.manual_seed(0)
convnet = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(8, 4, 1))
image = torch.randn(8, 3, 32, 32)
net = copy.deepcopy(convnet).to("hpu")
with torch.no_grad(), ev.Collector() as c:
    y = net(image.to("hpu"))
    htcore.mark_step()
    equal = torch.equal(y.cpu(), convnet(image))
(compiled,) = c.of(ev.Compile)
report(convolutions=sum(n.op == "aten::convolution" for n in compiled.graph.nodes),
       permutes=sum(n.op == "aten::permute" for n in compiled.graph.nodes),
       device_us=round(pm.retime(c.events).device_busy_ns / 1e3, 1), equal_to_cpu=equal)
