"""Faults injected into the settings (issue 37): every setting ``python -m hpu_lab config`` lists, set
to a bad value with its companion flag (the setting that makes it act), is refused naming it, or
warns once naming it while the program runs on. None is accepted in silence.

Where the bridge raises, hpu_lab raises (``PT_HPU_METRICS_DUMP_TRIGGERS=bogus``: the bridge's
``MetricDumpTrigger['bogus']`` is a KeyError at init). hpu_lab refuses every malformed value when it
is read, at ``import hpu_lab`` (config.validate_all), with a ConfigError naming the variable and the
form it expects, also where the bridge would only ignore it (``PT_HPU_GRAPH_DUMP_FORMAT=png``: the
bridge's visualizer picks no writer and dumps nothing; ``LOG_LEVEL_PT_FALLBACK=x``). A value that is
well formed but cannot act (a file that cannot be read or written, an op name that is no op) warns
once and the program runs on.
"""
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import hpu_lab  # noqa: F401
import hpu_lab.core as htcore
from hpu_lab.kernels import amp
from hpu_lab import config
from hpu_lab.dispatch import fallback
from hpu_lab.config import ConfigError
from hpu_lab.compiler.graph_dump import GraphDumpWarning
from hpu_lab.observe.metrics import MetricsFileWarning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def refused(form):
    return ("refused", form)


def warns(category, message, action, uses=2):
    """``action``: what makes the setting act, run ``uses`` times (the warning comes once)."""
    return ("warns", category, message, action, uses)


def _fallback():                                 # a CPU fallback (seed 003's digamma in bf16)
    return torch.digamma(torch.ones(3).to("hpu").bfloat16()).float().cpu()


def _compile():                                  # a graph no other test builds: a compile, a dump
    x = torch.arange(7.0).to("hpu")
    y = (x * 0.37 + 5).sin()
    if config.lazy_mode():
        htcore.mark_step()
    return y.cpu()


def _autocast():
    amp.reload()                                 # the lists are read at import (once); again here


# setting -> (bad value, companion settings, what must happen). {tmp} is the test's own folder;
# "{tmp}/a_file" is a regular file there.
CASES = {
    "PT_HPU_LAZY_MODE": ("2", {"PT_HPU_MAX_COMPOUND_OP_SIZE": "1"}, refused(r"expected 1 \(lazy mode\) or 0")),
    "PT_HPU_MAX_COMPOUND_OP_SIZE": ("abc", {"PT_HPU_LAZY_MODE": "1"}, refused("expected an integer >= -1")),
    "PT_HPU_RECIPE_CACHE_CONFIG": ("{tmp}/rc,maybe,64", {"LOG_LEVEL_PT_HABHELPER": "2"},
                                   refused("expected <path>,<delete true/false>,<max size in MB>")),
    "PT_HPU_ENABLE_LAZY_COLLECTIVES": ("sometimes", {"PT_HPU_LAZY_MODE": "1"}, refused("expected true/false")),
    "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": (
        "{tmp}/missing_list.txt", {"PT_HPU_AUTOCAST_FP32_OPS_LIST": "{tmp}/fp32_list.txt"},
        warns(UserWarning, r"PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST='.*missing_list.txt' cannot be read "
                           r"\(No such file or directory\); using the default list", _autocast, uses=1)),
    "PT_HPU_AUTOCAST_FP32_OPS_LIST": (
        "{tmp}/bad_list.txt", {"PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": "{tmp}/lower_list.txt"},
        warns(UserWarning, "autocast: no aten op named not_an_op; ignored", _autocast, uses=1)),
    "ENABLE_CONSOLE": ("perhaps", {"LOG_LEVEL_PT_FALLBACK": "1"}, refused("expected true/false")),
    "LOG_LEVEL_PT_FALLBACK": ("x", {"ENABLE_CONSOLE": "true"}, refused("expected an integer >= 0")),
    "LOG_LEVEL_PT_HABHELPER": ("x", {"ENABLE_CONSOLE": "true", "PT_HPU_RECIPE_CACHE_CONFIG": "{tmp}/rc,false,1"},
                               refused("expected an integer >= 0")),
    "PT_HPU_PLACE_ON_CPU": ("aten::digama", {"ENABLE_CONSOLE": "true", "LOG_LEVEL_PT_FALLBACK": "1"},
                            warns(fallback.PlaceOnCpuWarning, "PT_HPU_PLACE_ON_CPU: no op named aten::digama: "
                                  "it places nothing on the CPU", None)),
    "GRAPH_VISUALIZATION": ("perhaps", {"PT_HPU_GRAPH_DUMP_FORMAT": "svg"}, refused("expected true/false")),
    "PT_HPU_GRAPH_DUMP_FORMAT": ("png", {"GRAPH_VISUALIZATION": "true"},
                                 refused("expected one of pbtxt, svg, graphml, dot")),
    "PT_HPU_GRAPH_DUMP_PREFIX": ("x" * 300, {"GRAPH_VISUALIZATION": "true"},
                                 warns(GraphDumpWarning, r"GRAPH_VISUALIZATION=true: cannot write the graph dump "
                                       r".*File name too long.*the program runs on", _compile)),
    "PT_HPU_WEIGHT_SHARING": ("perhaps", {"PT_HPU_LAZY_MODE": "1"}, refused("expected true/false")),
    "PT_HPU_ENABLE_SYNAPSE_LAYOUT_HANDLING": ("perhaps", {"PT_HPU_LAZY_MODE": "1"}, refused("expected true/false")),
    "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES": ("perhaps", {"PT_HPU_LAZY_MODE": "1"}, refused("expected true/false")),
    "PT_HPUGRAPH_DISABLE_TENSOR_CACHE": ("perhaps", {"PT_HPUGRAPH_ENABLE_DRY_RUN": "true"},
                                         refused("expected true/false")),
    "PT_HPUGRAPH_ENABLE_DRY_RUN": ("perhaps", {"PT_HPUGRAPH_DISABLE_TENSOR_CACHE": "true"},
                                   refused("expected true/false")),
    "PT_HPU_ENABLE_CACHE_METRICS": ("perhaps", {"PT_HPU_METRICS_FILE": "{tmp}/m.json"}, refused("expected true/false")),
    "PT_HPU_METRICS_FILE": ("{tmp}/a_file/m.json", {"PT_HPU_METRICS_DUMP_TRIGGERS": "mark_step"},
                            warns(MetricsFileWarning, r"PT_HPU_METRICS_FILE='.*a_file/m.json': cannot write the "
                                  r"metrics file .*the program runs on", _compile)),
    "PT_HPU_METRICS_FILE_FORMAT": ("xml", {"PT_HPU_METRICS_FILE": "{tmp}/m.json"}, refused("expected one of json, text")),
    "PT_HPU_METRICS_DUMP_TRIGGERS": ("bogus", {"PT_HPU_METRICS_FILE": "{tmp}/m.json"},
                                     refused("expected a comma-separated list of mark_step, metric_change, "
                                             "process_exit")),
    "HPU_LAB_MEMORY_LIMIT": ("lots", {"PT_HPU_LAZY_MODE": "1"}, refused("expected a size such as 64MiB")),
    "HPU_LAB_SOURCE_LINES": ("perhaps", {"GRAPH_VISUALIZATION": "true"}, refused("expected true/false")),
    "HPU_LAB_DEVICE": ("gaudi9", {"PT_HPU_LAZY_MODE": "1"}, refused("expected one of gaudi, gaudi2, gaudi3")),
    "HPU_LAB_HOST_CARDS": ("0", {"HPU_LAB_DEVICE": "gaudi3"}, refused("expected an integer >= 1")),
    "HPU_LAB_RECIPE_EXECUTOR": ("llvm", {"PT_HPU_LAZY_MODE": "0"}, refused("expected one of torchscript, fx")),
}


def test_the_faults_cover_every_setting_python_m_hpu_lab_config_lists():
    p = subprocess.run([sys.executable, "-m", "hpu_lab", "config"], env=dict(os.environ, PYTHONPATH=ROOT),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    listed = [line.split()[0] for line in p.stdout.splitlines() if line.strip()]
    assert listed and sorted(listed) == sorted(CASES) == sorted(config.SETTINGS)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("a regular file, not a folder")
    (tmp_path / "fp32_list.txt").write_text("softmax\n")
    (tmp_path / "lower_list.txt").write_text("mm\n")
    (tmp_path / "bad_list.txt").write_text("softmax\nnot_an_op  # a typo\n")
    monkeypatch.chdir(tmp_path)                          # graph dumps go to ./.graph_dumps
    yield tmp_path
    config.reload()
    amp.reload()


def _fill(value, tmp):
    return value.replace("{tmp}", str(tmp))


@pytest.mark.parametrize("env", sorted(CASES))
def test_a_bad_value_with_its_companion_is_refused_or_warned_never_silent(env, folder, monkeypatch):
    bad, companions, expect = CASES[env]
    for k, v in companions.items():
        monkeypatch.setenv(k, _fill(v, folder))
    monkeypatch.setenv(env, _fill(bad, folder))
    if expect[0] == "refused":
        with pytest.raises(ConfigError, match=re.escape(f"{env}={_fill(bad, folder)!r}: ") + expect[1]):
            config.reload()                              # read now, as at import: refused, named
        assert "<error: " + env in config.describe()
    else:
        _, category, message, action, uses = expect
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            config.reload()
            for _ in range(uses if action is not None else 0):
                action()                                 # said once, not at every use
        said = [str(w.message) for w in seen if issubclass(w.category, category) and re.search(message, str(w.message))]
        assert len(said) == 1, [str(w.message) for w in seen]
    monkeypatch.delenv(env)                              # the runtime is usable again
    config.reload()
    assert torch.equal(_compile(), (torch.arange(7.0) * 0.37 + 5).sin())


ISSUE_CASES = {    # issue 37's three, end to end in a fresh process: the feature's trigger included
    "LOG_LEVEL_PT_FALLBACK": ({"LOG_LEVEL_PT_FALLBACK": "x", "ENABLE_CONSOLE": "true"}, "fallback"),
    "PT_HPU_GRAPH_DUMP_FORMAT": ({"PT_HPU_GRAPH_DUMP_FORMAT": "png", "GRAPH_VISUALIZATION": "true"}, "compile"),
    "PT_HPU_METRICS_DUMP_TRIGGERS": ({"PT_HPU_METRICS_DUMP_TRIGGERS": "bogus", "PT_HPU_METRICS_FILE": "m.json"},
                                     "compile"),
}
SCRIPT = """
    import torch, hpu_lab, hpu_lab.core as htcore
    if "{what}" == "fallback":
        print(torch.digamma(torch.ones(3).to("hpu").bfloat16()).float().cpu())
    else:
        x = torch.arange(5.0).to("hpu") * 2
        htcore.mark_step()
        print(x.cpu())
"""


@pytest.mark.parametrize("env", sorted(ISSUE_CASES))
def test_issue_37s_settings_are_refused_at_import_naming_them(env, tmp_path):
    values, what = ISSUE_CASES[env]
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(what=what))], cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=ROOT, **values), capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and p.stdout == ""           # nothing ran, nothing printed
    assert f"hpu_lab.config.ConfigError: {env}={values[env]!r}: expected" in p.stderr
    assert os.listdir(tmp_path) == []                      # no dump folder, no metrics file
