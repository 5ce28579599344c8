"""hpu_lab.config: every setting in one place, settable from Python, malformed values named."""
import pytest
import torch

import hpu_lab
from hpu_lab import config, lazy
from hpu_lab.config import ConfigError


@pytest.fixture(autouse=True)
def _restore():
    yield
    config.reload()


@pytest.mark.parametrize("env,raw,expected", [
    ("PT_HPU_RECIPE_CACHE_CONFIG", "/x,maybe,abc", r"PT_HPU_RECIPE_CACHE_CONFIG='/x,maybe,abc': expected "
                                                   r"<path>,<delete true/false>,<max size in MB>"),
    ("PT_HPU_RECIPE_CACHE_CONFIG", "/x,true,-5", "max size must be > 0"),
    ("PT_HPU_RECIPE_CACHE_CONFIG", "/x,true,10,extra", "PT_HPU_RECIPE_CACHE_CONFIG"),
    ("PT_HPU_LAZY_MODE", "2", r"PT_HPU_LAZY_MODE='2': expected 1 \(lazy mode\) or 0"),
    ("PT_HPU_MAX_COMPOUND_OP_SIZE", "abc", "PT_HPU_MAX_COMPOUND_OP_SIZE='abc': expected an integer"),
    ("HPU_LAB_MEMORY_LIMIT", "lots", "HPU_LAB_MEMORY_LIMIT='lots': expected a size such as 64MiB"),
    ("HPU_LAB_MEMORY_LIMIT", "12XB", "HPU_LAB_MEMORY_LIMIT"),
    ("LOG_LEVEL_PT_FALLBACK", "-1", "LOG_LEVEL_PT_FALLBACK='-1': expected an integer >= 0"),
    ("ENABLE_CONSOLE", "perhaps", "ENABLE_CONSOLE='perhaps': expected true/false"),
    ("PT_HPU_METRICS_DUMP_TRIGGERS", "never", "PT_HPU_METRICS_DUMP_TRIGGERS"),
])
def test_malformed_values_name_the_variable_and_the_form(env, raw, expected, monkeypatch):
    with pytest.raises(ConfigError, match=expected):
        config.set(**{env: raw})                       # from Python: refused at once
    monkeypatch.setenv(env, raw)
    with pytest.raises(ConfigError, match=expected):   # from the environment: at first use
        config.reload()                                # (the runtime re-reads its own settings)
        config.get(env)
    with pytest.raises(ConfigError, match=env):
        config.validate_all()
    assert env in config.describe() and "<error:" in config.describe()


def test_a_refused_value_leaves_the_previous_one():
    config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="4")
    with pytest.raises(ConfigError):
        config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="four")
    assert config.get("PT_HPU_MAX_COMPOUND_OP_SIZE") == 4 and lazy.S.max_ops == 4


def test_unknown_setting_is_refused_with_the_known_names():
    with pytest.raises(ConfigError, match="unknown setting 'PT_HPU_LAZY'.*PT_HPU_LAZY_MODE"):
        config.set(PT_HPU_LAZY="0")


@pytest.mark.parametrize("raw,expected", [
    ("", None), ("/tmp/rc", config.RecipeCacheConfig("/tmp/rc", False, None)),
    ("/tmp/rc,true,1024", config.RecipeCacheConfig("/tmp/rc", True, 1024.0)),
    ("/tmp/rc/,false,0.5", config.RecipeCacheConfig("/tmp/rc/", False, 0.5)),
    (",true,10", None),                                  # empty path disables the disk cache
])
def test_recipe_cache_config_forms(raw, expected):
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=raw)
    assert config.get("PT_HPU_RECIPE_CACHE_CONFIG") == expected


@pytest.mark.parametrize("raw,expected", [("64MiB", 64 << 20), ("2GiB", 2 << 30), ("1000", 1000),
                                          ("1.5GB", 1_500_000_000), ("512 KiB", 512 << 10)])
def test_memory_limit_forms(raw, expected):
    config.set(HPU_LAB_MEMORY_LIMIT=raw)
    assert torch.hpu.memory_stats()["Limit"] == expected
    assert torch.hpu.mem_get_info()[1] == expected


def test_default_memory_limit_is_gaudi2_hbm():
    assert config.get("HPU_LAB_MEMORY_LIMIT") == 96 << 30


@pytest.mark.parametrize("raw,expected", [("", None), ("none", frozenset()),
                                          ("digamma, aten::add", frozenset({"aten::digamma", "aten::add"}))])
def test_place_on_cpu_forms(raw, expected):
    config.set(PT_HPU_PLACE_ON_CPU=raw)
    assert config.get("PT_HPU_PLACE_ON_CPU") == expected


def test_lazy_mode_and_compound_size_reach_the_runtime():
    config.set(PT_HPU_LAZY_MODE="0", PT_HPU_MAX_COMPOUND_OP_SIZE="1")
    assert lazy.S.eager and lazy.S.max_ops == 1 and not hpu_lab.core.is_lazy()
    config.set(PT_HPU_MAX_COMPOUND_OP_SIZE="0")         # 0 or -1: no cap
    assert lazy.S.max_ops is None
    config.reload()
    assert not lazy.S.eager and lazy.S.max_ops is None


def test_python_bools_are_accepted():
    config.set(ENABLE_CONSOLE=True, PT_HPU_WEIGHT_SHARING=False)
    assert config.get("ENABLE_CONSOLE") is True and config.get("PT_HPU_WEIGHT_SHARING") is False


def test_reload_forgets_overrides_and_rereads_the_environment(monkeypatch):
    config.set(LOG_LEVEL_PT_FALLBACK="1")
    monkeypatch.setenv("LOG_LEVEL_PT_FALLBACK", "3")
    assert config.get("LOG_LEVEL_PT_FALLBACK") == 1      # the Python override wins
    config.reload()
    assert config.get("LOG_LEVEL_PT_FALLBACK") == 3
    monkeypatch.delenv("LOG_LEVEL_PT_FALLBACK")
    config.reload()
    assert config.get("LOG_LEVEL_PT_FALLBACK") == 5      # the default


def test_malformed_environment_surfaces_where_the_setting_is_used(monkeypatch):
    monkeypatch.setenv("HPU_LAB_MEMORY_LIMIT", "lots")
    config.reload()
    with pytest.raises(ConfigError, match="HPU_LAB_MEMORY_LIMIT='lots'"):
        torch.hpu.mem_get_info()
    config.set(HPU_LAB_MEMORY_LIMIT="1GiB")                # fixed from Python: usable again
    assert torch.hpu.mem_get_info()[1] == 1 << 30
    assert (torch.ones(2).to("hpu") * 2).cpu().tolist() == [2.0, 2.0]


def test_every_documented_variable_is_known():
    documented = ["PT_HPU_LAZY_MODE", "PT_HPU_MAX_COMPOUND_OP_SIZE", "PT_HPU_RECIPE_CACHE_CONFIG",
                  "PT_HPU_ENABLE_LAZY_COLLECTIVES", "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST",
                  "PT_HPU_AUTOCAST_FP32_OPS_LIST", "ENABLE_CONSOLE", "LOG_LEVEL_PT_FALLBACK",
                  "PT_HPU_PLACE_ON_CPU", "GRAPH_VISUALIZATION", "PT_HPU_GRAPH_DUMP_FORMAT",
                  "PT_HPU_GRAPH_DUMP_PREFIX", "PT_HPU_WEIGHT_SHARING", "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES",
                  "LOG_LEVEL_PT_HABHELPER", "PT_HPUGRAPH_DISABLE_TENSOR_CACHE"]
    assert set(documented) <= set(config.SETTINGS)
    config.validate_all()                                 # the defaults all parse
