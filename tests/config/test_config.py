"""hpu_lab.config: every setting in one place, settable from Python, malformed values named."""
import json
import os
import subprocess
import sys

import pytest
import torch

import hpu_lab
from hpu_lab import config, lazy
from hpu_lab.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def test_a_malformed_environment_is_refused_when_read(monkeypatch):
    monkeypatch.setenv("HPU_LAB_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match="HPU_LAB_MEMORY_LIMIT='lots'"):
        config.reload()                                   # read now: refused now, not at first use
    with pytest.raises(ConfigError, match="HPU_LAB_MEMORY_LIMIT='lots'"):
        torch.hpu.mem_get_info()
    config.set(HPU_LAB_MEMORY_LIMIT="1GiB")                # fixed from Python: usable again
    assert torch.hpu.mem_get_info()[1] == 1 << 30
    assert (torch.ones(2).to("hpu") * 2).cpu().tolist() == [2.0, 2.0]


@pytest.mark.parametrize("env,raw", [("LOG_LEVEL_PT_FALLBACK", "loud"), ("PT_HPU_GRAPH_DUMP_FORMAT", "png"),
                                     ("PT_HPU_ENABLE_LAZY_COLLECTIVES", "sometimes"),
                                     ("PT_HPU_METRICS_FILE_FORMAT", "xml"),
                                     ("PT_HPU_RECIPE_CACHE_CONFIG", "garbage")])
def test_settings_whose_feature_has_not_run_are_still_refused_when_read(env, raw, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env, raw)
    with pytest.raises(ConfigError, match=f"{env}={raw!r}"):
        config.reload()
    assert os.listdir(tmp_path) == []                      # nothing created (no ./garbage)


def test_import_refuses_a_malformed_setting(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, PT_HPU_GRAPH_DUMP_FORMAT="png")
    p = subprocess.run([sys.executable, "-c", "import hpu_lab"], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    assert p.returncode != 0
    assert "ConfigError: PT_HPU_GRAPH_DUMP_FORMAT='png': expected one of pbtxt, svg, graphml, dot" in p.stderr


@pytest.mark.parametrize("raw", ["garbage", "recipes,true,10", ".", "/x,true,10,false"])
def test_a_recipe_cache_path_that_is_not_a_folder_path_is_refused(raw):
    with pytest.raises(ConfigError, match=r"PT_HPU_RECIPE_CACHE_CONFIG=.*expected <path>,<delete true/false>"):
        config.set(PT_HPU_RECIPE_CACHE_CONFIG=raw)


def test_a_recipe_cache_path_under_a_regular_file_is_refused(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(ConfigError, match=f"the cache folder {f}/rc lies under {f}, which is not a directory"):
        config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{f}/rc,false,10")
    with pytest.raises(ConfigError, match=f"the cache folder {f} is not a directory"):
        config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{f},false,10")
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"./rc,false,10")            # relative forms are fine
    assert config.get("PT_HPU_RECIPE_CACHE_CONFIG").path == "./rc"


def test_a_cache_folder_that_becomes_unusable_turns_the_cache_off_and_runs_on(tmp_path):
    from hpu_lab.compiler import disk_cache
    import hpu_lab.core as htcore
    d = tmp_path / "later_a_file"
    config.set(PT_HPU_RECIPE_CACHE_CONFIG=f"{d},false,10")           # fine when read...
    d.write_text("now a regular file")                                 # ...then the path changes
    x = torch.arange(5.).to("hpu")
    with pytest.warns(disk_cache.DiskCacheWarning, match="PT_HPU_RECIPE_CACHE_CONFIG: cannot use .* the disk cache is off"):
        y = (x * 3 + 1).exp()
        htcore.mark_step()
    assert torch.equal(y.cpu(), (torch.arange(5.) * 3 + 1).exp())


# ---------------------------------------------------------------- PT_HPU_METRICS_FILE

METRICS_CHILD = """
import torch, hpu_lab, hpu_lab.core as htcore
x = torch.ones(3).to("hpu")
for k in range(2):
    x = x * 2
    htcore.mark_step()
print(x.cpu().tolist())
"""


def _metrics_run(tmp_path, **env):
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    p = subprocess.run([sys.executable, "-c", METRICS_CHILD], env=e, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


def test_metrics_file_json_at_every_trigger(tmp_path):
    path = tmp_path / "out" / "metrics.json"
    _metrics_run(tmp_path, PT_HPU_METRICS_FILE=str(path),
                 PT_HPU_METRICS_DUMP_TRIGGERS="process_exit,mark_step,metric_change")
    recs = json.loads(path.read_text())                    # a whole JSON array, closed at exit
    assert set(recs[0]) == {"metric_name", "triggered_by", "generated_on", "statistics"}
    by = {}
    for r in recs:
        by.setdefault(r["triggered_by"], []).append(r)
    names = set(hpu_lab.observe.metrics.names())
    assert {r["metric_name"] for r in by["process_exit"]} == names
    assert len(by["mark_step"]) == 2 * len(names)           # every metric after each mark_step
    last = {r["metric_name"]: r["statistics"] for r in by["process_exit"]}
    assert last["mark_step"]["TotalNumber"] == 2 and last["graph_compilation"]["TotalNumber"] == 1
    changes = [r["statistics"]["TotalNumber"] for r in by["metric_change"] if r["metric_name"] == "graph_launch"]
    assert changes == [1, 2]                                # written when it changed, each time


def test_metrics_file_text_default_trigger_and_unique_names(tmp_path):
    path = tmp_path / "m.txt"
    for _ in range(2):
        _metrics_run(tmp_path, PT_HPU_METRICS_FILE=str(path), PT_HPU_METRICS_FILE_FORMAT="text")
    first, second = path.read_text(), (tmp_path / "m.txt.1").read_text()   # never overwritten
    assert first.count("Triggered by: process_exit") == len(hpu_lab.observe.metrics.names())
    assert "Metric name: mark_step\nTriggered by: process_exit\nGenerated on: " in second
    assert "Statistics:\n\tTotalNumber: 2\n" in first


def test_metrics_file_per_rank(tmp_path):
    _metrics_run(tmp_path, PT_HPU_METRICS_FILE=str(tmp_path / "m.json"), RANK="3")
    assert os.listdir(tmp_path) == ["m-rank3.json"]


def test_an_unwritable_metrics_file_warns_and_the_program_runs_on(tmp_path):
    (tmp_path / "f").write_text("x")
    p = _metrics_run(tmp_path, PT_HPU_METRICS_FILE=str(tmp_path / "f" / "m.json"),
                     PT_HPU_METRICS_DUMP_TRIGGERS="mark_step")
    assert "PT_HPU_METRICS_FILE=" in p.stderr and "the program runs on" in p.stderr
    assert p.stdout.strip() == "[4.0, 4.0, 4.0]"


def test_every_documented_variable_is_known():
    documented = ["PT_HPU_LAZY_MODE", "PT_HPU_MAX_COMPOUND_OP_SIZE", "PT_HPU_RECIPE_CACHE_CONFIG",
                  "PT_HPU_ENABLE_LAZY_COLLECTIVES", "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST",
                  "PT_HPU_AUTOCAST_FP32_OPS_LIST", "ENABLE_CONSOLE", "LOG_LEVEL_PT_FALLBACK",
                  "PT_HPU_PLACE_ON_CPU", "GRAPH_VISUALIZATION", "PT_HPU_GRAPH_DUMP_FORMAT",
                  "PT_HPU_GRAPH_DUMP_PREFIX", "PT_HPU_WEIGHT_SHARING", "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES",
                  "LOG_LEVEL_PT_HABHELPER", "PT_HPUGRAPH_DISABLE_TENSOR_CACHE"]
    assert set(documented) <= set(config.SETTINGS)
    config.validate_all()                                 # the defaults all parse
