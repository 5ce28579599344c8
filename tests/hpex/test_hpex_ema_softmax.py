"""hpex.movingavrg.FusedEMA and hpex CustomSoftmax on hpu equal their plain-torch definitions."""
import math
from copy import deepcopy

import torch
from torch import nn

from hpu_lab.hpex.kernels import CustomSoftmax
from hpu_lab.hpex.movingavrg import FusedEMA


def test_fused_ema_tracks_the_float_entries_of_the_state_dict():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ema_cpu = deepcopy(model).eval()
    fused = FusedEMA(deepcopy(model).to("hpu"), decay=0.5)
    hmodel = deepcopy(model).to("hpu")
    for step in range(1, 3):
        with torch.no_grad():
            for p, hp in zip(model.parameters(), hmodel.parameters()):
                p.add_(1.0)
                hp.add_(1.0)
        d = 0.5 * (1 - math.exp(-step / 2000))
        msd = model.state_dict()
        for k, v in ema_cpu.state_dict().items():
            if v.is_floating_point():
                v.mul_(d).add_((1 - d) * msd[k])
        fused.update(hmodel)
    for (k, want), got in zip(ema_cpu.state_dict().items(), fused.ema.state_dict().values()):
        torch.testing.assert_close(got.cpu(), want, msg=k)


def test_custom_softmax_forward_and_backward():
    x = torch.randn(4, 9, dtype=torch.bfloat16)
    xc = x.float().requires_grad_()
    ref = torch.softmax(xc, -1)
    ref.backward(torch.arange(36.0).view(4, 9))
    xh = x.to("hpu").requires_grad_()
    out = CustomSoftmax.apply(xh, 0)
    out.backward(torch.arange(36.0).view(4, 9).bfloat16().to("hpu"))
    assert torch.equal(out.cpu(), ref.detach().bfloat16())
    torch.testing.assert_close(xh.grad.cpu().float(), xc.grad, atol=0.1, rtol=0.02)
