"""Launching a recipe: reserve its memory, order it after the inputs other streams still produce,
queue it on a stream (lazy flushes, HPU Graph replays and torch.compile graphs all launch here).

The order after another stream's launch is implicit (no ``wait_stream`` needed, a read is never too
early); its ``Launch`` event names those launches (``waits_for``) so that the Gaudi clock starts the
work after their modeled end, as it does after an explicit ``StreamWait``. A queued host-to-device
copy (``executor.Copy``) is such a launch too: a recipe reading its buffer names it."""
from __future__ import annotations

from .. import events as ev
from ..tensor import _itemsize, storage_extent
from ..runtime import executor, memory


def _held_bytes(externals) -> int:
    """Device bytes of inputs whose tensors died while the graph was pending: only the graph holds
    them now, so they are in use until it runs (not in InUse any more). A long lazy graph that
    reads many freed inputs needs more memory than the same work cut by mark_step (seed 003)."""
    n = 0
    for inp in externals:
        w = inp.owner
        if w is not None and w() is None and inp.meta is not None:
            size, stride, dtype = inp.meta
            n += storage_extent(size, stride) * _itemsize(dtype)
    return n


def launch_recipe(recipe, externals, stream: int, srcs=None):
    """Check memory, then queue the recipe on stream ``stream`` (an index); return at once."""
    memory.reserve_transient(recipe.peak_bytes, f"recipe {recipe.short_key} ({recipe.node_count} nodes)",
                             held=_held_bytes(externals))
    s = executor.stream(stream)
    waits_for = []
    for inp in externals:
        src_launch = inp.launch
        if src_launch is not None and src_launch.stream != s.index:
            if (src_launch.recipe is not None or type(src_launch) is executor.Copy) and \
                    src_launch.id not in waits_for:
                # recorded even when it has finished here: on the Gaudi clock it may still run
                waits_for.append(src_launch.id)
            if not src_launch.done.is_set():
                s.submit_fn(src_launch.done.wait)    # cross-stream dependency: never read too early
    launch = executor.Launch(recipe, list(externals), s.index, srcs)
    recipe.launches += 1
    if ev.wants(ev.Launch):
        t = ev.now()
        ev.emit(ev.Launch(t, t, "host", ev.recorder.step, launch_id=launch.id, recipe_id=recipe.id,
                          key=recipe.short_key, stream=s.index, graph=recipe.summary,
                          waits_for=tuple(waits_for)))
    s.submit(launch)
    return launch
