"""The bridge's inference set-up (hpu_lab/core/quantization.py): hpu_set_inference_env fuses Conv+BN
with the same results, hpu_inference_initialize marks every state tensor of the model as const
(by its device memory, so state_dict's fresh aliases see the mark), teardown turns the mode off."""
import pytest
import torch

import hpu_lab.core as htcore
from hpu_lab.core import quantization as q


def test_inference_env_marks_every_parameter_and_buffer_as_const():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval().to("hpu")
    before = q._get_marked_const_count()
    htcore.hpu_set_inference_env()
    assert torch.hpu.is_inference_mode_enabled()
    htcore.hpu_inference_initialize(model)
    sd = model.state_dict()
    assert all(q.is_const(t) for t in sd.values()) and q.is_const(model[0].weight)
    assert q._get_marked_const_count() == before + len(sd)
    ids = [q.const_id(t) for t in sd.values()]
    assert sorted(ids) == list(range(before, before + len(sd)))
    htcore.hpu_inference_initialize(model)                  # marking twice keeps the ids
    assert [q.const_id(t) for t in model.state_dict().values()] == ids
    x = torch.randn(5, 4)
    with torch.no_grad():
        out = model(x.to("hpu"))
        htcore.mark_step()
    torch.testing.assert_close(out.cpu(), model.cpu()(x))
    htcore.hpu_teardown_inference_env()
    assert not torch.hpu.is_inference_mode_enabled()


def test_unmarked_or_host_tensors_fail_loudly():
    model = torch.nn.Linear(2, 2).to("hpu")
    with pytest.raises(RuntimeError, match="not marked as const: weight, bias"):
        q._check_params_as_const(model)
    with pytest.raises(RuntimeError, match="weight is on cpu, not hpu"):
        q._mark_params_as_const(torch.nn.Linear(2, 2))
    assert q.const_id(torch.ones(1)) == -1


def test_set_inference_env_with_a_model_fuses_conv_and_batchnorm():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 8, 8)
    fused = htcore.hpu_set_inference_env(model)
    htcore.hpu_teardown_inference_env()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused.modules())
    with torch.no_grad():
        torch.testing.assert_close(fused.to("hpu")(x.to("hpu")).cpu(), model(x), atol=1e-5, rtol=1e-5)
