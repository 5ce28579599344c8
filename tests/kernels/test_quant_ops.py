"""quantized_decomposed (de)quantization on hpu (hpu_lab/kernels/quant_ops.py): Gaudi's kernels keep fp8's
fraction bits (no rounding to integers), quantize a bf16 input in bf16, and dequantize fp8 input."""
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines torch.ops.quantized_decomposed

q = torch.ops.quantized_decomposed
FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _bits(t):
    return t.view(torch.uint8) if t.dtype in FP8 else t


@pytest.mark.parametrize("out_dtype", FP8)
@pytest.mark.parametrize("tensor_args", [False, True])
def test_quantize_per_tensor_to_fp8_keeps_the_fraction(out_dtype, tensor_args):
    torch.manual_seed(0)
    x = torch.rand(12, 16) * 300
    scale, zp = (torch.tensor(3.0), torch.tensor(2)) if tensor_args else (3.0, 2)
    dev = (scale.to("hpu"), zp.to("hpu")) if tensor_args else (scale, zp)
    out = q.quantize_per_tensor(x.to("hpu"), *dev, 1, 90, out_dtype).cpu()
    expect = torch.clamp(x * (1.0 / torch.tensor(3.0)) + 2, 1, 90).to(out_dtype)
    assert out.dtype == out_dtype and torch.equal(_bits(out), _bits(expect))
    # torch's CPU decomposition rounds to an integer first: a different (and coarser) answer
    assert not torch.equal(q.quantize_per_tensor(x, 3.0, 2, 1, 90, out_dtype).float(), out.float())


def test_quantize_per_tensor_to_int8_rounds_half_to_even_as_torch():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, 300.0, -300.0])
    out = q.quantize_per_tensor(x.to("hpu"), 1.0, 0, -128, 127, torch.int8).cpu()
    assert torch.equal(out, q.quantize_per_tensor(x, 1.0, 0, -128, 127, torch.int8))
    assert out.tolist() == [0, 2, 2, 0, 127, -128]


@pytest.mark.parametrize("axis", [1, -1])
def test_quantize_per_channel_of_bf16_is_computed_in_bf16(axis):
    torch.manual_seed(1)
    x = (torch.rand(4, 6, 5) * 400).bfloat16()
    scales, zps = torch.rand(x.shape[axis]) * 10 + 3, torch.randint(0, 8, (x.shape[axis],))
    out = q.quantize_per_channel(x.to("hpu"), scales.to("hpu"), zps.to("hpu"), axis, 0, 127, torch.int8).cpu()
    shape = [1, 1, 1]
    shape[axis] = -1
    s, z = scales.bfloat16().view(shape), zps.bfloat16().view(shape)
    expect = torch.clamp(torch.round(x * s.reciprocal()) + z, 0, 127).to(torch.int8)   # every step in bf16
    assert torch.equal(out, expect)


@pytest.mark.parametrize("in_dtype", FP8 + [torch.int8])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_dequantize_per_channel_of_fp8(in_dtype, out_dtype):
    torch.manual_seed(2)
    x = (torch.rand(3, 7, 4) * 100).to(in_dtype)
    scales, zps = torch.rand(7), torch.randint(-5, 5, (7,))
    out = q.dequantize_per_channel(x.to("hpu"), scales.to("hpu"), zps.to("hpu"), 1, 0, 0, in_dtype,
                                   out_dtype=out_dtype).cpu()
    expect = ((x.float() - zps.view(1, -1, 1)) * scales.view(1, -1, 1)).to(out_dtype)
    assert out.dtype == out_dtype and torch.equal(out, expect)


def test_dequantize_per_tensor_of_fp8_and_a_dtype_mismatch():
    x = (torch.rand(5, 5) * 50).to(torch.float8_e4m3fn)
    out = q.dequantize_per_tensor(x.to("hpu"), 0.25, -3, 0, 0, x.dtype).cpu()
    assert torch.equal(out, (x.float() + 3) * 0.25)
    with pytest.raises(RuntimeError, match="expecting input to have dtype torch.int8"):
        q.dequantize_per_tensor(x.to("hpu"), 0.25, -3, 0, 0, torch.int8)
