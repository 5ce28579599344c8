"""``habana_frameworks.torch.dynamo.compile_backend.config``: the ``hpu_backend`` settings.

The same names, environment variables and defaults as the bridge's module, held by torch's own config
module machinery (``install_config_module``: ``config.patch(...)``, ``save_config``, ...), and the
dict-like ``configuration_flags`` view that tests and scripts use (``configuration_flags["use_eager_fallback"]``).

What hpu_lab does with them: **nothing changes the answer**. They are knobs of the real graph compiler
(recipes, decompositions, graph freezing, reinplacing): hpu_lab's ``hpu_backend`` builds its recipes one
way, and every op it cannot place already runs eagerly (a graph break), which is what
``use_eager_fallback=True`` allows on Gaudi. So the values are stored, read back and validated like the
real ones, and documented here as no-ops of the emulator.
"""
import os
import sys

from torch.utils._config_module import install_config_module

_TRUE = ("on", "1", "yes", "true", "y", "t")
_FALSE = ("off", "0", "no", "false", "n", "f")


def _env_bool(var: str, default: str) -> bool:
    raw = os.getenv(var, default).lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{var}={raw!r}: expected one of {', '.join(_TRUE + _FALSE)}")


def _env_decomposition(var: str, default: str) -> str:
    raw = os.getenv(var, default).lower()
    if raw not in ("habana", "core_aten", "none"):
        raise ValueError(f'{var}={raw!r}: expected "habana", "core_aten" or "none"')
    return raw


use_compiled_recipes = _env_bool("PT_HPU_COMPILE_USE_RECIPES", "1")
decomposition_mode = _env_decomposition("PT_HPU_COMPILE_DECOMPOSITION_MODE", "habana")
keep_input_mutations = _env_bool("PT_HPU_KEEP_INPUT_MUTATIONS", "1")
use_eager_fallback = _env_bool("PT_HPU_USE_EAGER_FALLBACK", "1")
use_graph_freezing = _env_bool("PT_HPU_COMPILE_GRAPH_FREEZE", "0")
discard_frozen_params = _env_bool("PT_HPU_COMPILE_DISCARD_FROZEN_PARAMS", "0")
remove_unnecessary_clones = _env_bool("PT_HPU_COMPILE_REMOVE_UNNECESSARY_CLONES", "1")
use_inplace_allreduce = _env_bool("PT_HPU_USE_INPLACE_COLLECTIVE", "1")
use_inplace_index_copy = _env_bool("PT_HPU_USE_INPLACE_INDEX_COPY", "1")
inference = _env_bool("PT_HPU_USE_INFERENCE_COMPILER", "1")
enable_sfg = _env_bool("PT_HPU_ENABLE_SFG", "0")
use_cpp_partitioner = _env_bool("PT_HPU_USE_CPP_PARTITIONER", "1")
enable_allreduce_graph_split = _env_bool("PT_HPU_ENABLE_ALLREDUCE_GRAPH_SPLIT", "1")
force_static_compile = _env_bool("PT_HPU_FORCE_STATIC_COMPILE", "0")
reinplace_add = _env_bool("PT_HPU_REINPLACE_ADD", "1")
reassign_full_copy = _env_bool("PT_HPU_REASSIGN_FULL_COPY", "1")
reassign_copy_ = _env_bool("PT_HPU_REASSIGN_COPY_", "1")
use_boxed_input = _env_bool("PT_HPU_USE_BOXED_INPUT", "1")

install_config_module(sys.modules[__name__])      # patch(), save_config(), to_dict(), unknown-name errors
# torch's config module refuses to set any name that is not a setting; the import system (and
# hpu_lab.compat's alias loader) must still be able to set the module's own dunders
sys.modules[__name__].__dict__["_bypass_keys"] = frozenset(type(sys.modules[__name__])._bypass_keys) | {
    "__spec__", "__loader__", "__path__", "__package__", "__file__", "__cached__"}


class _Flags:
    """``configuration_flags[name]``: item access to the settings above (the bridge's older API)."""

    def __getitem__(self, key):
        return getattr(sys.modules[__name__], key)

    def __setitem__(self, key, value):
        setattr(sys.modules[__name__], key, value)

    def __contains__(self, key):
        return key in sys.modules[__name__]._config


configuration_flags = _Flags()
