"""accelerate's README training loop, unchanged but for the device choice: the hpu run is this script
under `python -m hpu_lab run` (accelerate finds habana_frameworks and picks hpu), the reference is
the same script with --cpu (Accelerator(cpu=True)). Prints the losses and the final parameters."""
import sys

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu="--cpu" in sys.argv)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(32, 6, generator=g), torch.randn(32, 2, generator=g))
data = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)

model, optimizer, data = accelerator.prepare(model, optimizer, data)      # the README's order
losses = []
for epoch in range(2):
    for source, targets in data:
        optimizer.zero_grad()
        output = model(source)
        loss = torch.nn.functional.mse_loss(output, targets)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
print("DEVICE", accelerator.device.type)
print("LOSSES", [x.hex() for x in losses])
print("PARAMS", [v.hex() for p in model.parameters() for v in p.detach().cpu().reshape(-1).tolist()])
