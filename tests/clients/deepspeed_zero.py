"""deepspeed.initialize as DeepSpeed's getting-started shows it, with ZeRO stage argv[1] and the default
optimizer ("Adam": DeepSpeed's FusedAdam; on hpu it calls torch.ops.hpu.optimizer_adamw). With --cpu
the same model and data train without DeepSpeed, each step applying DeepSpeed's own HPU FusedAdam
function (the same kernel) to CPU tensors: ZeRO on one rank must not change a value. Prints the
losses and the final parameters."""
import math
import os
import sys

import torch

stage = int(sys.argv[1])
cpu = "--cpu" in sys.argv
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)) for _ in range(4)]
lr, betas, eps, wd = 1e-2, (0.9, 0.999), 1e-8, 0.0

if not cpu:
    os.environ.update(DS_ACCELERATOR="hpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed
    # gradient_clipping: DeepSpeed clips to norm 1.0 by default, each ZeRO stage with its own norm code;
    # off here, so that the comparison is of initialize, ZeRO's buffers and FusedAdam
    config = {"train_batch_size": 4, "steps_per_print": 1000, "zero_optimization": {"stage": stage},
              "gradient_clipping": 0.0,
              "optimizer": {"type": "Adam", "params": {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": wd}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    print("OPTIMIZER", type(getattr(optimizer, "optimizer", optimizer)).__name__)
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(engine(x.to(engine.device)), y.to(engine.device))
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    params = list(engine.module.parameters())
else:
    import hpu_lab  # noqa: F401  (torch.ops.hpu.optimizer_adamw's CPU kernel)
    from deepspeed.ops.op_builder.hpu.fused_adam import HPUFusedAdam  # DeepSpeed's own HPU step
    params = list(model.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses = []
    for step, (x, y) in enumerate(batches, 1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        model.zero_grad()
        loss.backward()
        grads = [p.grad for p in params]
        with torch.no_grad():
            HPUFusedAdam.htcore = __import__("hpu_lab.core", fromlist=["core"])
            HPUFusedAdam.is_lazy_mode = False
            HPUFusedAdam.multi_tensor_adam(2048 * 32, None, [grads, [p.data for p in params], m, v], lr,
                                           betas[0], betas[1], eps, step, 1, 1, wd)
        losses.append(loss.item())
print("LOSSES", [x.hex() for x in losses])
print("PARAMS", [v.hex() for p in params for v in p.detach().float().cpu().reshape(-1).tolist()])
