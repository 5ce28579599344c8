"""A bf16 input into an fp32 Linear outside autocast (issue 35 item 6): what the bridge's output-meta
functions decide (hpu_lab/kernels/mixed_matmul.py): addmm promotes to the common dtype, mm refuses at the
op with MmMeta's message. It used to be recorded and fail at the next sync as a device error."""
import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab import config


@pytest.mark.parametrize("lazy", ["1", "0"])
@pytest.mark.parametrize("shape", [(5, 4), (2, 5, 4)], ids=["2d", "3d"])
def test_bf16_input_into_fp32_linear_with_bias_gives_the_promoted_product(lazy, shape):
    config.set(PT_HPU_LAZY_MODE=lazy)
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    mod = torch.nn.Linear(4, 3)
    mod.load_state_dict(ref.state_dict())
    mod.to("hpu")
    x = torch.randn(*shape).bfloat16()
    y = mod(x.to("hpu"))
    htcore.mark_step()
    assert y.dtype == torch.float32
    assert torch.equal(y.cpu(), ref(x.float()))        # bf16 values are exact in float32


@pytest.mark.parametrize("lazy", ["1", "0"])
def test_mm_of_two_dtypes_is_refused_at_the_op_with_the_bridges_message(lazy):
    config.set(PT_HPU_LAZY_MODE=lazy)
    a, b = torch.randn(2, 4).bfloat16().to("hpu"), torch.randn(4, 3).to("hpu")
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype, but got: BFloat16 != Float"):
        torch.mm(a, b)
    with pytest.raises(RuntimeError, match="BFloat16 != Float"):
        torch.nn.functional.linear(a, b.t())              # no bias: linear is a matmul
    assert torch.equal(torch.mm(a.float(), b).cpu(), torch.mm(a.cpu().float(), b.cpu()))   # usable after


def test_weight_gradient_of_the_promoted_addmm_is_refused_by_mm():
    """The backward's weight gradient is mm(grad^T fp32, input bf16): MmMeta refuses it on a Gaudi too."""
    mod = torch.nn.Linear(4, 3).to("hpu")
    y = mod(torch.randn(5, 4).bfloat16().to("hpu"))
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        y.sum().backward()
