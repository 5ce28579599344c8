"""The bridge module names Intel's own tests import (issue 16): compile-backend config, bridge_config,
the deterministic switch. Each is the real behaviour where hpu_lab has it, a documented no-op where the
name is a knob of the real compiler."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

from hpu_lab import compat, config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compile_backend_configuration_flags(habana, monkeypatch):
    from habana_frameworks.torch.dynamo.compile_backend import config as cfg
    from habana_frameworks.torch.dynamo.compile_backend.config import configuration_flags

    assert configuration_flags["use_eager_fallback"] is True         # the bridge's default
    before = configuration_flags["use_eager_fallback"]
    configuration_flags["use_eager_fallback"] = False
    assert cfg.use_eager_fallback is False                            # one setting, two spellings
    configuration_flags["use_eager_fallback"] = before
    with cfg.patch(decomposition_mode="core_aten"):                  # torch's config machinery
        assert configuration_flags["decomposition_mode"] == "core_aten"
    assert cfg.decomposition_mode == "habana"
    with pytest.raises(AttributeError, match="no_such_flag"):
        configuration_flags["no_such_flag"] = 1


def test_compile_backend_config_reads_the_environment():
    # read once at import, as the bridge does: so each value is tried in a fresh process
    code = "import hpu_lab.dynamo.compile_backend.config as c; print(c.use_eager_fallback)"
    env = dict(os.environ, PT_HPU_USE_EAGER_FALLBACK="0", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
    env["PT_HPU_USE_EAGER_FALLBACK"] = "maybe"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "PT_HPU_USE_EAGER_FALLBACK='maybe'" in r.stderr


def test_bridge_config_getters_follow_hpu_lab_settings(habana):
    import habana_frameworks.torch.internal.bridge_config as bc
    before = config.get("PT_HPU_MAX_COMPOUND_OP_SIZE")
    assert bc.get_pt_hpu_max_compound_op_size() == before
    with bc.env_setting("PT_HPU_MAX_COMPOUND_OP_SIZE", "1"):
        assert config.get("PT_HPU_MAX_COMPOUND_OP_SIZE") == 1          # the setter acts on hpu_lab
    assert config.get("PT_HPU_MAX_COMPOUND_OP_SIZE") == before
    assert bc.get_pt_enable_int64_support() is True                   # int64 is exact here
    with pytest.raises(RuntimeError, match="int64"):
        bc.set_pt_enable_int64_support(False)
    with pytest.raises(AttributeError, match="PT_NOT_A_FLAG"):
        bc.get_pt_not_a_flag


def test_deterministic_switch_is_kept_and_warns():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        before = torch.hpu.getDeterministic()
        torch.hpu.setDeterministic(True)
        assert torch.hpu.getDeterministic() is True
        torch.hpu.setDeterministic(before)
    assert all("deprecated" in str(x.message) for x in w) and len(w) == 4
    with pytest.raises(TypeError):
        torch.hpu.setDeterministic("yes")


def test_hpex_c_fused_norm_clips_in_place_and_returns_the_total(habana):
    from habana_frameworks.torch import _hpex_C
    torch.manual_seed(0)
    vecs = [torch.rand(2, 16) for _ in range(3)]
    total = torch.norm(torch.stack([torch.norm(v) for v in vecs]))
    dev = [v.to("hpu") for v in vecs]
    got = _hpex_C.fused_norm(dev, torch.ones(1).to("hpu"), 2.0)
    torch.testing.assert_close(got.cpu(), total)
    for v, d in zip(vecs, dev):
        torch.testing.assert_close(d.cpu(), v * (1.0 / (total + 1e-6)))
    small = [torch.full((4,), 0.01).to("hpu")]
    _hpex_C.fused_norm(small, torch.ones(1).to("hpu"), 2.0)                # under the max: untouched
    assert torch.equal(small[0].cpu(), torch.full((4,), 0.01))
