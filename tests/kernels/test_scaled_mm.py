"""torch._scaled_mm on hpu (hpu_lab/kernels/scaled_mm.py): Gaudi's fp8 GEMM takes a row-major mat2 and computes
(a @ b) * scale_a * scale_b * scale_result + bias in float32, rounded once to out_dtype."""
import pytest
import torch

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _operands(dtype):
    torch.manual_seed(3)
    return (torch.rand(6, 8) * 4).to(dtype), (torch.rand(8, 5) * 8).to(dtype)   # mat2 row-major


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_scaled_mm_row_major_mat2_with_bias(dtype, out_dtype):
    a, b = _operands(dtype)
    sa, sb, bias = torch.tensor(1.5), torch.tensor(0.25), torch.randn(5)
    out = torch._scaled_mm(a.to("hpu"), b.to("hpu"), scale_a=sa.to("hpu"), scale_b=sb.to("hpu"),
                           bias=bias.to(out_dtype).to("hpu"), out_dtype=out_dtype).cpu()
    expect = (a.float() @ b.float()) * sa * sb + bias.to(out_dtype).float()
    assert out.dtype == out_dtype and torch.equal(out, expect.to(out_dtype))


@pytest.mark.parametrize("dtype", FP8)
def test_scaled_mm_fp8_result_is_multiplied_by_scale_result(dtype):
    a, b = _operands(dtype)
    s = [torch.tensor(2.0), torch.tensor(0.5), torch.tensor(0.05)]
    out = torch._scaled_mm(a.to("hpu"), b.to("hpu"), scale_a=s[0].to("hpu"), scale_b=s[1].to("hpu"),
                           scale_result=s[2].to("hpu"), out_dtype=dtype).cpu()
    expect = ((a.float() @ b.float()) * s[0] * s[1] * s[2]).to(dtype)
    assert out.dtype == dtype and torch.equal(out.view(torch.uint8), expect.view(torch.uint8))


def test_scaled_mm_refuses_non_fp8_and_mismatched_shapes():
    x = torch.ones(2, 3).to("hpu")
    one = torch.tensor(1.0).to("hpu")
    with pytest.raises(RuntimeError, match="expected float8_e4m3fn/float8_e5m2 operands"):
        torch._scaled_mm(x, x.t(), scale_a=one, scale_b=one)
    a = torch.ones(2, 3).to(torch.float8_e4m3fn).to("hpu")
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(2x3 and 2x3\)"):
        torch._scaled_mm(a, a, scale_a=one, scale_b=one)
