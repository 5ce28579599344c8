"""The libraries Gaudi users train with, each in its published style, on hpu equal to the same script on
CPU (issue 35): accelerate (the README's prepare order), Lightning Fabric (lightning-habana's set-up),
DeepSpeed (deepspeed.initialize, ZeRO 0/1/2, the default FusedAdam) and optimum-habana's GaudiTrainer
(lazy and torch.compile). The libraries are the [clients] extra; each test skips, saying why, when its
library is not installed. Each script runs in its own process: on hpu under `python -m hpu_lab run`
(the library finds habana_frameworks as on a Gaudi), on CPU as plain `python`."""
import functools
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.slow


def _need(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install -c <(echo torch==2.13.0) -e '.[clients]'")


@functools.lru_cache(maxsize=None)
def _import_error(module):
    """Why ``module`` does not import in a fresh interpreter with habana imports on ('' if it does)."""
    code = f"from hpu_lab import compat; compat.enable_habana_imports(); import {module}"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    return "" if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]


def _run(script, *args, hpu, tmp_path, env=None):
    cmd = [sys.executable] + (["-m", "hpu_lab", "run"] if hpu else []) + [os.path.join(SCRIPTS, script), *args]
    if not hpu:
        cmd.append("--cpu")
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in r.stdout.splitlines()
            if ln.split(" ", 1)[0] in ("DEVICE", "LOSSES", "PARAMS", "OPTIMIZER")}


def _same(hpu, cpu):
    assert hpu["LOSSES"] == cpu["LOSSES"]
    assert hpu["PARAMS"] == cpu["PARAMS"]


def test_accelerate_readme_loop_trains_on_hpu_as_on_cpu(tmp_path):
    _need("accelerate")
    hpu = _run("accelerate_readme.py", hpu=True, tmp_path=tmp_path)
    cpu = _run("accelerate_readme.py", hpu=False, tmp_path=tmp_path)
    assert hpu["DEVICE"] == "hpu" and cpu["DEVICE"] == "cpu"
    _same(hpu, cpu)


def test_accelerate_big_model_loading_trains_on_hpu_as_on_cpu(tmp_path):
    # init_empty_weights + load_checkpoint_in_model: set_module_tensor_to_device rebuilds each
    # parameter as type(param)(value, requires_grad=...) (was: HPUTensor.__new__() missing arguments)
    _need("accelerate")
    hpu = _run("accelerate_big_model.py", hpu=True, tmp_path=tmp_path)
    cpu = _run("accelerate_big_model.py", hpu=False, tmp_path=tmp_path)
    assert hpu["DEVICE"] == "hpu" and cpu["DEVICE"] == "cpu"
    _same(hpu, cpu)


def test_lightning_fabric_setup_trains_on_hpu_as_on_cpu(tmp_path):
    _need("lightning", "lightning_habana")
    hpu = _run("fabric_setup.py", hpu=True, tmp_path=tmp_path)
    cpu = _run("fabric_setup.py", hpu=False, tmp_path=tmp_path)
    assert hpu["DEVICE"] == "hpu" and cpu["DEVICE"] == "cpu"
    _same(hpu, cpu)


@pytest.mark.parametrize("sharding", ["NO_SHARD", "FULL_SHARD"])
def test_lightning_fabric_fsdp_trains_on_hpu_as_on_cpu(tmp_path, sharding):
    # lightning-habana's HPUFSDPStrategy on one card; FSDP's backward aborted the process (its
    # post-backward hook's record_stream under no_dispatch had no hpu kernel)
    _need("lightning", "lightning_habana")
    hpu = _run("fabric_fsdp.py", sharding, hpu=True, tmp_path=tmp_path)
    cpu = _run("fabric_fsdp.py", hpu=False, tmp_path=tmp_path)
    assert hpu["DEVICE"] == "hpu" and cpu["DEVICE"] == "cpu"
    _same(hpu, cpu)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_deepspeed_zero_with_fused_adam_trains_on_hpu_as_on_cpu(tmp_path, stage):
    _need("deepspeed")
    hpu = _run("deepspeed_zero.py", str(stage), hpu=True, tmp_path=tmp_path, env={"PORT": str(29540 + stage)})
    cpu = _run("deepspeed_zero.py", str(stage), hpu=False, tmp_path=tmp_path)
    assert hpu["OPTIMIZER"] == "FusedAdam"
    _same(hpu, cpu)


def test_transformers_trainer_with_torch_compile_on_hpu_backend_as_on_cpu(tmp_path):
    # GaudiTrainer's torch_compile path without optimum-habana: the Trainer loop (through accelerate)
    # on a model compiled with the hpu_backend (was: "expected SubclassCreationMeta, got PlainTensorMeta")
    _need("transformers", "accelerate")
    hpu = _run("hf_trainer_compile.py", hpu=True, tmp_path=tmp_path, env={"PT_HPU_LAZY_MODE": "0"})
    cpu = _run("hf_trainer_compile.py", hpu=False, tmp_path=tmp_path)
    assert hpu["DEVICE"] == "hpu" and cpu["DEVICE"] == "cpu"
    _same(hpu, cpu)


@pytest.mark.parametrize("mode", ["lazy", "compile"])
def test_gaudi_trainer_trains_on_hpu_as_on_cpu(tmp_path, mode):
    _need("optimum.habana", "transformers")
    why = _import_error("optimum.habana.transformers.models")        # what GaudiTrainer adapts (imports torchvision)
    if why:
        pytest.skip(f"optimum-habana's GaudiTrainer does not import here: {why} (it imports torchvision, whose "
                    f"PyPI wheels are built for CUDA torch: a torchvision built for the CPU torch is needed)")
    args = ["--compile"] if mode == "compile" else []
    env = {"PT_HPU_LAZY_MODE": "0"} if mode == "compile" else {}
    hpu = _run("gaudi_trainer.py", *args, hpu=True, tmp_path=tmp_path, env=env)
    cpu = _run("gaudi_trainer.py", *args, hpu=False, tmp_path=tmp_path)
    _same(hpu, cpu)


def test_use_hpu_graphs_for_training_is_the_module_cacher_line_of_notebook_06(tmp_path):
    # Notebook 06 section 5 runs `htcore.hpu.ModuleCacher()(model=model, inplace=True)` for optimum-habana's
    # use_hpu_graphs_for_training (claim O5). GaudiTrainer's own flag must do the same: wrap the model it
    # trains, capture its forward and backward once, replay both every step, stop the host tracing the
    # forward, and train to the same losses and parameters as the line, and as no graphs at all.
    _need("optimum.habana", "transformers")
    why = _import_error("optimum.habana.transformers.models")
    if why:
        pytest.skip(f"optimum-habana's GaudiTrainer does not import here: {why} (it imports torchvision, whose "
                    f"PyPI wheels are built for CUDA torch: a torchvision built for the CPU torch is needed)")
    cmd = [sys.executable, "-m", "hpu_lab", "run", os.path.join(SCRIPTS, "gaudi_trainer_graphs.py")]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    runs = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("GRAPHS "))[len("GRAPHS "):])
    flag, line, none = runs["flag"], runs["line"], runs["none"]
    assert flag["wrapped"], "use_hpu_graphs_for_training=True: the model GaudiTrainer trained has no ModuleCacher"
    assert not none["wrapped"] and none["captured"] == 0 and none["replays_per_step"] == 0
    assert flag == line, f"the flag and the notebook's line differ: {flag} != {line}"
    assert flag["graphs"] == 1 and flag["captured"] == 2 and flag["replays_per_step"] == 2   # forward + backward
    # the host traces the forward once, at the capture, instead of at every step
    assert flag["forward_ops_per_step"] * flag["steps"] == none["forward_ops_per_step"] > 0
    assert flag["losses"] == none["losses"] and flag["params_sha256"] == none["params_sha256"]
