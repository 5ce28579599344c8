"""accelerate's big-model loading, unchanged but for the device: the model is made on the meta device
(`init_empty_weights`), its checkpoint loaded onto the device by `load_checkpoint_in_model` (each
tensor through `set_module_tensor_to_device`, which rebuilds a parameter as `type(param)(value, ...)`),
one tensor sent back to the host and out again, then trained. The hpu run is this script under
`python -m hpu_lab run`, the reference the same with --cpu. Prints the losses and the parameters."""
import sys

import torch
from accelerate import init_empty_weights
from accelerate.utils import load_checkpoint_in_model, set_module_tensor_to_device

device = "cpu" if "--cpu" in sys.argv else "hpu"


def make():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


torch.manual_seed(0)
torch.save(make().state_dict(), "checkpoint.bin")
with init_empty_weights():
    model = make()
load_checkpoint_in_model(model, "checkpoint.bin", device_map={"": device})
set_module_tensor_to_device(model, "2.bias", "cpu")
set_module_tensor_to_device(model, "2.bias", device)
classes = {type(p).__name__ for p in model.parameters()}
assert all(isinstance(p, torch.nn.Parameter) and p.device.type == device and p.requires_grad
           for p in model.parameters()), classes

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(32, 6, generator=g), torch.randn(32, 2, generator=g)
losses = []
for step in range(4):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[step * 8:(step + 1) * 8].to(device)), y[step * 8:(step + 1) * 8].to(device))
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("DEVICE", next(model.parameters()).device.type)
print("LOSSES", [v.hex() for v in losses])
print("PARAMS", [v.hex() for p in model.parameters() for v in p.detach().cpu().reshape(-1).tolist()])
