"""HMP casts what the user calls, never what runs inside hpu_lab's shape inference.

Many meta kernels are Python decompositions that call torch functions; HMP wraps those same
functions. Casting inside them gave nll_loss a bfloat16 result on hpu where CPU gives float32.
"""
import warnings

import torch
import torch.nn.functional as F

import hpu_lab  # noqa: F401


def test_nll_loss_dtype_under_hmp_equals_cpu(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from hpu_lab.hpex import hmp
    bf16, fp32 = tmp_path / "bf16", tmp_path / "fp32"
    bf16.write_text("\n".join(hmp.hmp_bf16_ops))
    fp32.write_text("\n".join(hmp.hmp_fp32_ops))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hmp.convert(opt_level="O1", bf16_file_path=str(bf16), fp32_file_path=str(fp32))
    try:
        got = {}
        for dev in ("cpu", "hpu"):
            torch.manual_seed(0)
            lin = torch.nn.Linear(10, 10).to(dev)
            out = F.log_softmax(lin(torch.randn(4, 10).to(dev)), dim=1)
            loss = F.nll_loss(out, torch.tensor([1, 2, 3, 4]).to(dev))
            got[dev] = (out.dtype, loss.dtype, loss.item())
        assert got["hpu"][:2] == got["cpu"][:2] == (torch.float32, torch.float32)
        assert got["hpu"][2] == got["cpu"][2]
    finally:
        hmp._restore()
