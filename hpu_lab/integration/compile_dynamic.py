"""torch.compile on hpu with dynamic shapes: one dynamic recipe for a symbolic graph, as hpu_backend does.

When dynamo sees a second input shape it retraces with symbolic sizes (``s0``, ``s1``: automatic
dynamic shapes, or ``mark_dynamic`` / ``dynamic=True``). The bridge's hpu_backend compiles such a graph
into ONE dynamic recipe (``is_module_dynamic`` in its compile_backend/passes.py; with
``PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES`` on it also compiles dynamic where dynamo's config asks for it),
which then runs at every shape in the graph's guards without compiling again; only
``PT_HPU_FORCE_STATIC_COMPILE=1`` keeps recipes static (then each new shape compiles a recipe of its
own). hpu_lab does the same: the symbolic aten graph is the recipe; a launch binds the symbols to the
sizes of its inputs, and the outputs' sizes (and any size the graph returns for the backward) are the
graph's expressions evaluated with them. Memory planning and the Gaudi clock use the sizes the graph
was traced at (dynamo's hints).

The Recompiles tab shows the difference: with a dynamic recipe, the compile that made it (reason
"... dynamic recipe over s0, s1") and then cache hits at every new size; with static compiles, one
compile per new size ("input 0 shape changed ...").
"""
from __future__ import annotations

import torch


def symbols_of(g: torch.fx.Graph) -> list:
    """The free symbols of the graph's placeholders, by name (``['s0', 's1']``)."""
    names = set()
    for n in g.nodes:
        if n.op == "placeholder":
            val = n.meta.get("val")
            for x in _sizes(val):
                if isinstance(x, torch.SymInt):
                    names.update(str(s) for s in x.node.expr.free_symbols)
    return sorted(names)


def _sizes(val):
    if isinstance(val, torch.SymInt):
        return [val]
    if isinstance(val, torch.Tensor):
        return [*val.shape, *val.stride()]
    return []


def hint(x):
    """The size the graph was traced at, for a symbolic one."""
    if isinstance(x, torch.SymInt):
        h = x.node.hint
        if h is None:
            raise RuntimeError(f"hpu_backend: size {x} has no example value (an unbacked size)")
        return int(h)
    return x


def binding(placeholders, args) -> dict:
    """symbol -> value, read from the runtime arguments of the placeholders that carry one alone."""
    env = {}
    for ph, a in zip(placeholders, args):
        val = ph.meta.get("val")
        if isinstance(val, torch.SymInt):
            pairs = [(val, a)]
        elif isinstance(val, torch.Tensor) and isinstance(a, torch.Tensor):
            pairs = list(zip((*val.shape, *val.stride()), (*a.shape, *a.stride())))
        else:
            continue
        for sym, actual in pairs:
            if isinstance(sym, torch.SymInt) and sym.node.expr.is_Symbol:
                import sympy          # here, not at import: `import hpu_lab` leaves sympy to the warm-up
                env[sym.node.expr] = sympy.Integer(int(actual))
    return env


def concrete(x, env):
    """An int for ``x`` (a SymInt evaluated with the launch's symbols)."""
    if isinstance(x, torch.SymInt):
        import sympy
        v = sympy.sympify(x.node.expr.xreplace(env))
        if not v.is_number:
            raise RuntimeError(f"hpu_backend: cannot evaluate size {x.node.expr} with {env}")
        return int(v)
    return x


def output(val, env):
    """What a graph output is at this launch: (size, stride, dtype) of a tensor, or a number."""
    if isinstance(val, torch.Tensor):
        return (tuple(concrete(s, env) for s in val.shape), tuple(concrete(s, env) for s in val.stride()),
                val.dtype)
    if val is None:
        return None
    return ("const", concrete(val, env))
