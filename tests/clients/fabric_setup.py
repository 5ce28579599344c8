"""Lightning Fabric as lightning-habana documents it (HPUAccelerator + SingleHPUStrategy), or with
--cpu on Lightning's CPU accelerator. Prints the losses and the final parameters."""
import sys

import torch
from lightning.fabric import Fabric

cpu = "--cpu" in sys.argv
if cpu:
    fabric = Fabric(accelerator="cpu", devices=1)
else:
    from lightning_habana.fabric import HPUAccelerator, SingleHPUStrategy
    fabric = Fabric(accelerator=HPUAccelerator(), devices=1, strategy=SingleHPUStrategy())
fabric.launch()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model, optimizer = fabric.setup(model, optimizer)
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
print("DEVICE", fabric.device.type)
print("LOSSES", [x.hex() for x in losses])
print("PARAMS", [v.hex() for p in model.parameters() for v in p.detach().cpu().reshape(-1).tolist()])
