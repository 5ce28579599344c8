"""Lightning Fabric with FSDP as lightning-habana's tests set it up (HPUFSDPStrategy over the HPU
accelerator, one card; argv[1] is the sharding strategy; HPUFSDPPrecision runs the forward under bf16
autocast whatever its precision string), or with --cpu the same loop on Lightning's CPU accelerator
with bf16-mixed and without FSDP (Lightning refuses FSDP on CPU; with one rank FSDP's sharded step is
the plain step). FSDP's post-backward hook calls ``record_stream`` under ``no_dispatch()``; that call
aborted the process on hpu. Prints the losses and the final (full) parameters."""
import sys

import torch
from lightning.fabric import Fabric
from torch.distributed.fsdp.wrap import always_wrap_policy

sharding = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "FULL_SHARD"
cpu = "--cpu" in sys.argv
if cpu:
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
else:
    from lightning_habana.fabric import HPUAccelerator
    from lightning_habana.fabric.plugins.fsdp_precision import HPUFSDPPrecision
    from lightning_habana.fabric.strategies.fsdp import HPUFSDPStrategy
    strategy = HPUFSDPStrategy(parallel_devices=[torch.device("hpu")], auto_wrap_policy=always_wrap_policy,
                               sharding_strategy=sharding, precision=HPUFSDPPrecision("32-true"))
    fabric = Fabric(accelerator=HPUAccelerator(), devices=1, strategy=strategy)
fabric.launch()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
model = fabric.setup_module(model)
optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
g = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(32, 6, generator=g), torch.randn(32, 2, generator=g))
loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=8))
losses = []
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        losses.append(loss.item())
state = fabric.strategy.get_module_state_dict(model)       # FSDP: the full parameters
params = [v.hex() for t in state.values() for v in t.detach().cpu().reshape(-1).tolist()]
print("DEVICE", fabric.device.type)
print("LOSSES", [x.hex() for x in losses])
print("PARAMS", params)
