"""Modules of the bridge's own internals that its tests and tools import (``habana_frameworks.torch._hpex_C``,
...), mapped by ``hpu_lab.compat``; each holds what hpu_lab can do for real, nothing invented."""
