"""Packaging: pyproject.toml and environment.yml list the same packages; `import hpu_lab` needs
none of the lab's view libraries."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def normalise(requirement: str) -> str:
    """'scikit_learn >= 1' -> 'scikit-learn' (PEP 503 name, no version, extras or markers)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_requirements() -> dict[str, str]:
    """Every requirement in pyproject (main + all extras), by normalised name; self-references
    such as 'hpu_lab[lab]' are only a way to include another extra, so they are dropped."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        reqs += group
    own = normalise(project["name"])
    return {normalise(r): r.strip() for r in reqs if normalise(r) != own}


def environment_pip_requirements() -> list[str]:
    """The list under `dependencies: - pip:` in environment.yml. PyYAML if present, else a small
    hand parser for that one simple shape (indentation-based list of strings)."""
    text = (ROOT / "environment.yml").read_text()
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        env = yaml.safe_load(text)
        pip = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
        assert len(pip) == 1, "environment.yml needs exactly one `- pip:` list"
        return [str(r) for r in pip[0]]
    reqs, pip_indent = [], None
    for line in text.splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped.strip():
            continue
        indent = len(stripped) - len(stripped.lstrip())
        if pip_indent is None:
            if stripped.strip() == "- pip:":
                pip_indent = indent
        elif indent > pip_indent and stripped.strip().startswith("- "):
            reqs.append(stripped.strip()[2:].strip().strip("'\""))
        else:
            break
    assert reqs, "no `- pip:` list found in environment.yml"
    return reqs


def test_pyproject_and_environment_yml_in_sync():
    py = pyproject_requirements()
    env = {normalise(r): r.strip() for r in environment_pip_requirements()}
    assert sorted(set(py) - set(env)) == [], "in pyproject.toml but not in environment.yml"
    assert sorted(set(env) - set(py)) == [], "in environment.yml but not in pyproject.toml"
    # torch's pin must be the same everywhere: another version means a multi-GB CUDA download.
    assert py["torch"].replace(" ", "") == env["torch"].replace(" ", "") == "torch==2.13.0"


def test_environment_yml_installs_torch_first():
    assert normalise(environment_pip_requirements()[0]) == "torch"


def test_test_extra_includes_lab_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "hpu_lab[lab]" in [r.replace(" ", "") for r in extras["test"]]


# A finder placed first on sys.meta_path that refuses the view libraries, as if not installed.
BLOCK_VIEWS = """
import sys
BLOCKED = {"matplotlib", "ipywidgets", "networkx", "IPython", "ipykernel", "widgets"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"blocked for this test: {name}", name=name)
        return None
sys.meta_path.insert(0, Block())
import torch, hpu_lab, hpu_lab.lab.data
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("ok")
"""


@pytest.mark.skipif(not (ROOT / "hpu_lab" / "__init__.py").exists(),
                    reason="hpu_lab/__init__.py does not exist yet (the runtime is written separately)")
def test_import_hpu_lab_without_view_libraries():
    out = subprocess.run([sys.executable, "-c", BLOCK_VIEWS], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
