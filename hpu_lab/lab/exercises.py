"""The notebooks' exercises, each read from the event stream (practice.py; reference answers: answers/).

Each ``observe`` takes the learner's Run and returns facts (counts, reason strings); each ``judge``
says "not yet" while the facts are the section's unchanged code's, "wrong" when the change was made
but the answer disagrees with the facts, and "right" (with why) otherwise.
"""
from __future__ import annotations

from collections import Counter

from .. import events as ev
from .practice import WRONG, Run, compare_answer, exercise, not_changed


def _steps(run: Run) -> int:
    """Training steps in the run: one batch of images copied to the device a step."""
    return max(len(_batch_sizes(run)), 1)


def _batch_sizes(run: Run) -> list:
    """The batch size of each batch of 28x28 fp32 images the run copied to the device, in order."""
    image = 28 * 28 * 4
    return [e.nbytes // image for e in run.of(ev.HostToDevice)
            if e.nbytes % image == 0 and e.nbytes // image not in (128,)]     # (not fc1's weight)


def _last_step(run: Run, marks_per_step: int = 2) -> list:
    """The events of the run's last training step (the last ``marks_per_step`` mark_steps)."""
    idx = [i for i, e in enumerate(run.events) if isinstance(e, ev.MarkStep)]
    if len(idx) <= marks_per_step:
        return list(run.events)
    return run.events[idx[-marks_per_step - 1] + 1: idx[-1] + 1]


def _big_launch_keys(run: Run) -> set:
    """Keys of the launched recipes of the largest graph (the forward+backward of a training step)."""
    sized = [(sum(1 for n in e.graph.nodes if n.op not in ("input", "output")), e.key)
             for e in run.of(ev.Launch) if e.graph is not None]
    big = max((n for n, _ in sized), default=0)
    return {k for n, k in sized if n == big}


@exercise("00.1", "Remove the first htcore.mark_step() from train: how many launches per step now?")
class RemoveFirstMarkStep:
    @staticmethod
    def observe(run):
        return {"launches": len(run.of(ev.Launch)), "steps": _steps(run),
                "largest_graph_nodes": max((e.node_count for e in run.of(ev.GraphBuilt)), default=0)}

    @staticmethod
    def judge(f, answer):
        per_step = f["launches"] / f["steps"]
        if per_step >= 2:
            return not_changed(f"{per_step:g} launches a step: forward+backward, then the optimizer")
        return compare_answer(answer, per_step, "launches per step",
                              f"one mark_step a step cuts one graph: forward, backward and the optimizer in one "
                              f"recipe of {f['largest_graph_nodes']} nodes, launched once a step")


@exercise("00.2", "Train with batch_size=256 on the 1600 samples: which training step (1-based) recompiles?")
class LastBatchRecompiles:
    @staticmethod
    def observe(run):
        sizes = _batch_sizes(run)
        changed = [i + 1 for i in range(1, len(sizes)) if sizes[i] != sizes[i - 1]]
        return {"batch_sizes": sizes, "new_shape_steps": changed,
                "reasons": [e.reason for e in run.of(ev.Compile) if "shape changed" in e.reason]}

    @staticmethod
    def judge(f, answer):
        if not f["new_shape_steps"]:
            return not_changed("every batch has the same size, so no step needs a new recipe")
        step = f["new_shape_steps"][-1]
        why = (f"compiled: {f['reasons'][-1]}" if f["reasons"] else
               "its recipe was already in the cache from an earlier run, so no compile this time")
        return compare_answer(answer, step, "the step with a new input shape",
                              f"1600 = 6 x 256 + 64: step {step}'s batch of {f['batch_sizes'][step - 1]} is a new "
                              f"input shape, so its graph needs a recipe of its own ({why})")


@exercise("00.3", "Add print(loss.item()) inside the loop: how many host syncs per step?")
class PrintInLoop:
    @staticmethod
    def observe(run):
        syncs = [e for e in run.of(ev.HostSync) if e.reason == ".item()"]
        return {"item_syncs": len(syncs), "steps": _steps(run)}

    @staticmethod
    def judge(f, answer):
        if not f["item_syncs"]:
            return not_changed("the host never waits for a value inside the loop")
        per_step = f["item_syncs"] / f["steps"]
        return compare_answer(answer, per_step, "host syncs (.item()) per step",
                              "each .item() needs the loss's value: the host waits for the device there, "
                              "a sync bar in the Timeline at every print")


@exercise("01.1", "In section 4, replace y.item() with print(y): what is the host sync reason now?", "a string")
class PrintReason:
    @staticmethod
    def observe(run):
        return {"reasons": [e.reason for e in run.of(ev.HostSync)]}

    @staticmethod
    def judge(f, answer):
        reasons = f["reasons"]
        if not reasons:
            return WRONG, "your run never made the host wait: printing y needs its value (is y on 'hpu'?)"
        if reasons == [".item()"] * len(reasons):
            return not_changed("the sync reason is still '.item()'")
        other = next(r for r in reasons if r != ".item()")
        return compare_answer(answer, other, "the sync reason",
                              f"printing a tensor reads its values too, so the graph runs and the host waits "
                              f"(reason {other!r})")


@exercise("02.1", "In section 3, move the first mark_step to just after model(data): how many graphs per step?")
class MarkStepAfterForward:
    @staticmethod
    def observe(run):
        return {"launches": len(run.of(ev.Launch)), "steps": _steps(run)}

    @staticmethod
    def judge(f, answer):
        per_step = f["launches"] / f["steps"]
        if per_step == 2:
            return not_changed("two graphs a step: forward+backward, then the optimizer")
        return compare_answer(answer, per_step, "graphs per step",
                              "a mark_step after the forward cuts it from the backward: forward, backward and the "
                              "optimizer are three recipes, each launched once a step")


@exercise("03.3", "Run section 4's ModuleCacher loop with batch_size=256: how many graphs does the cacher hold?")
class ModuleCacherBatch256:
    @staticmethod
    def observe(run):
        return {"captures": len(run.of(ev.CaptureEnd)), "graphs_held": run.value}

    @staticmethod
    def judge(f, answer):
        held = f["graphs_held"]
        if not isinstance(held, int):
            return WRONG, "return the cacher's graph count from your run: `return model.module_cacher.num_graphs`"
        if held <= 1:
            return not_changed("the cacher holds one graph: every batch has one shape")
        return compare_answer(answer, held, "graphs held by the cacher",
                              "ModuleCacher keeps one graph per input shape: 1600 = 6 x 256 + 64, so a graph "
                              "for 256 and one for 64")


@exercise("04.1", "In section 1, add a batch of 97: how many recipes of the forward+backward graph now?")
class Batch97:
    @staticmethod
    def observe(run):
        return {"fwd_bwd_recipes": len(_big_launch_keys(run)), "batch_sizes": sorted(set(_batch_sizes(run)))}

    @staticmethod
    def judge(f, answer):
        n = f["fwd_bwd_recipes"]
        if n <= 2:
            return not_changed(f"the forward+backward graph has {n} recipe(s), for batches of {f['batch_sizes']}")
        return compare_answer(answer, n, "forward+backward recipes",
                              "each new batch size is a new input shape: one recipe each for 200, 96 and 97")


@exercise("04.3", "In section 4, replace the boolean indexing with torch.relu(tmp): how many data-dependent host syncs now?")
class ReluInsteadOfIndexing:
    @staticmethod
    def observe(run):
        syncs = Counter(e.reason for e in run.of(ev.HostSync))
        return {"nonzero_syncs": syncs.get("data-dependent op aten::nonzero", 0),
                "data_dependent_syncs": sum(n for r, n in syncs.items() if r.startswith("data-dependent")),
                "module2_graphs": run.value}

    @staticmethod
    def judge(f, answer):
        if f["nonzero_syncs"]:
            return not_changed(f"{f['nonzero_syncs']} host syncs for aten::nonzero: the boolean indexing is still there")
        return compare_answer(answer, f["data_dependent_syncs"], "data-dependent host syncs",
                              "relu keeps the shape, so nothing depends on the values: no host sync, and module2 "
                              f"sees one shape (graphs held: {f['module2_graphs']})")


@exercise("01.2", "In section 5, make y a temporary: which tensor class does the sub node get now?", "a string")
class TemporaryY:
    @staticmethod
    def observe(run):
        classes = [n.tensor_class for e in run.of(ev.Launch) if e.graph is not None
                   for n in e.graph.nodes if n.op == "aten::sub"]
        return {"sub_tensor_class": classes[-1] if classes else None}

    @staticmethod
    def judge(f, answer):
        c = f["sub_tensor_class"]
        if c is None:
            return WRONG, "no launched graph has an aten::sub node: run the section's chain and its mark_step"
        if c == "persistent":
            return not_changed("y is still held by the program, so the sub node's output is persistent")
        return compare_answer(answer, c, "the sub node's tensor class",
                              "nothing outside the recipe reads y any more: it lives only in the recipe's working "
                              "memory, like every intermediate")


@exercise("01.3", "In section 7, change the learning rate between two steps: does the optimizer graph "
          "recompile? (True/False)", "True or False")
class LearningRateChange:
    @staticmethod
    def observe(run):
        return {"optimizer_recipes": len({e.key for e in run.of(ev.Launch)
                                          if e.graph is not None and not _has_backward(e.graph)}),
                "constant_changes": [e.reason for e in run.of(ev.Compile) if "constant changed" in e.reason]}

    @staticmethod
    def judge(f, answer):
        if f["optimizer_recipes"] <= 1:
            return not_changed("the optimizer runs one recipe: the learning rate never changed")
        why = (f"reason: {f['constant_changes'][0]}" if f["constant_changes"] else
               "a second recipe of the optimizer graph (from the cache this time)")
        return compare_answer(answer, True, "whether it recompiles",
                              "the learning rate is a Python float: it is traced as a constant of the graph, so "
                              f"a new value is a new graph ({why})")


def _has_backward(graph) -> bool:
    return any("backward" in n.op or n.op == "aten::mm" for n in graph.nodes)


@exercise("01.4", "In section 7 (async), make the matrices 1500x1500: how many of the 100 ops does the host "
          "trace while the device runs heavy(), on the notebook's card (gaudi2)?")
class AsyncLaunch:
    @staticmethod
    def observe(run):
        from .. import perfmodel as pm
        launches = [e for e in run.of(ev.Launch) if e.graph is not None]
        if not launches:
            return {"overlapped_ops": None, "size": None}
        r = pm.retime(run.events, "gaudi2")
        with_mm = [e for e in launches if any(n.op == "aten::mm" for n in e.graph.nodes)]
        if not with_mm:
            return {"overlapped_ops": None, "size": None}
        heavy = with_mm[-1]
        span = next((s for s in r.events if isinstance(s, ev.DeviceExecution) and s.launch_id == heavy.launch_id),
                    None)
        ops = [e for e in r.events if isinstance(e, ev.OpAccumulated)]
        mms = [n for n in heavy.graph.nodes if n.op == "aten::mm"]
        size = mms[0].shape[0] if mms else None
        lt = next(e for e in r.events if isinstance(e, ev.Launch) and e.launch_id == heavy.launch_id)
        over = sum(1 for e in ops if lt.t_end <= e.t_end <= span.t_end) if span is not None else 0
        return {"overlapped_ops": over, "size": size, "device_ms": (span.t_end - span.t_start) / 1e6 if span else 0}

    @staticmethod
    def judge(f, answer):
        if f["size"] is None:
            return WRONG, "no heavy() launch in your run: call heavy(a), then mark_step, then trace the 100 ops"
        if f["size"] == 700:
            return not_changed("the matrices are still 700x700")
        return compare_answer(answer, f["overlapped_ops"], "ops traced while the device runs heavy()",
                              f"at {f['size']}x{f['size']} heavy() keeps Gaudi 2 busy {f['device_ms']:.3f} ms on the "
                              "Gaudi clock: the host's ops (72 us each, modeled) fill more of it")


@exercise("03.1", "In section 1, capture torch.tanh(static_x @ w) * step with a Python variable step, then "
          "replay after changing step: which multiplier does the replay use?")
class CapturedConstant:
    @staticmethod
    def observe(run):
        v = run.value if isinstance(run.value, dict) else {}
        return {"replays": len(run.of(ev.Replay)), "captures": len(run.of(ev.CaptureEnd)),
                "multiplier_used": v.get("multiplier_used"), "step_now": v.get("step_now")}

    @staticmethod
    def judge(f, answer):
        if not f["replays"] or f["multiplier_used"] is None:
            return not_changed("capture once, change step, replay, and return "
                               "{'multiplier_used': (replayed / tanh(x @ w)).mean().item(), 'step_now': step}")
        if f["step_now"] == f["multiplier_used"]:
            return not_changed("step was not changed between the capture and the replay")
        return compare_answer(answer, round(f["multiplier_used"], 3), "the multiplier the replay used",
                              "a Python number is traced as a constant: the graph recorded its value at capture "
                              f"time; changing step afterwards ({f['step_now']}) changes nothing in the replay")


@exercise("03.2", "Wrap only model.fc1 with make_graphed_callables: how many ops are traced per step now?")
class GraphOnlyFc1:
    @staticmethod
    def observe(run):
        last = _last_step(run)
        return {"ops_per_step": sum(1 for e in last if isinstance(e, ev.OpAccumulated)),
                "replays_per_step": sum(1 for e in last if isinstance(e, ev.Replay)),
                "relu_traced": any(isinstance(e, ev.OpAccumulated) and "relu" in e.op for e in last)}

    @staticmethod
    def judge(f, answer):
        if f["replays_per_step"] == 0:
            return WRONG, "nothing was replayed: wrap model.fc1 (model.fc1 = make_graphed_callables(model.fc1, (x,)))"
        if not f["relu_traced"]:
            return not_changed("the whole model is graphed: its relu is replayed, not traced")
        return compare_answer(answer, f["ops_per_step"], "ops traced per step",
                              "only fc1's forward and backward replay; flatten, relu, dropout, fc2, the loss and the "
                              f"optimizer are traced ({f['replays_per_step']:g} replays a step)")


@exercise("05.2", "Serve the test set (197 images) with batch_size=197: how many captures?")
class ServeBatch197:
    @staticmethod
    def observe(run):
        return {"captures": len(run.of(ev.CaptureEnd)), "replays": len(run.of(ev.Replay))}

    @staticmethod
    def judge(f, answer):
        if f["captures"] == 2 and f["replays"] == 2:
            return not_changed("batches of 64: a graph for 64 and one for the last 5")
        return compare_answer(answer, f["captures"], "captures",
                              "one batch, one shape: one capture" if f["captures"] == 1 else
                              "each new batch shape is captured once")


@exercise("06.4", "In section 10, use torch.optim.AdamW(foreach=True) instead of FusedAdamW: how many graph "
          "nodes does the update have?")
class AdamWNodes:
    @staticmethod
    def observe(run):
        v = run.value if isinstance(run.value, list) else []
        return {"update_nodes": sum(v) if v else None, "fused": any("optimizer_adamw" in n.op
                for e in run.of(ev.Launch) if e.graph is not None for n in e.graph.nodes)}

    @staticmethod
    def judge(f, answer):
        if f["update_nodes"] is None:
            return WRONG, "return update_graph(...)'s node counts from your run"
        if f["fused"]:
            return not_changed("the update still runs the fused optimizer's kernels")
        return compare_answer(answer, f["update_nodes"], "the update's graph nodes",
                              "AdamW's foreach ops are traced one by one (mul, lerp, addcmul, sqrt, div, add, "
                              "addcdiv), where FusedAdamW's update is one fused node")


@exercise("07.1", "In section 1, call torch.lgamma on bfloat16: which op does the fallback log name?", "a string")
class LgammaFallback:
    @staticmethod
    def observe(run):
        return {"fallbacks": [e.op for e in run.of(ev.CPUFallback)],
                "sync_reasons": [e.reason for e in run.of(ev.HostSync)]}

    @staticmethod
    def judge(f, answer):
        if not f["fallbacks"]:
            return WRONG, "no op fell back to the CPU: call torch.lgamma on a bfloat16 tensor on 'hpu'"
        if set(f["fallbacks"]) == {"aten::digamma"}:
            return not_changed("the fallback is still digamma's")
        op = f["fallbacks"][0]
        return compare_answer(answer, op, "the op that fell back",
                              f"{op} has no bfloat16 kernel on the device: it runs on the CPU, the host waiting for "
                              f"its input first ({f['sync_reasons'][0] if f['sync_reasons'] else 'a host sync'})")


@exercise("07.3", "In section 10, print every 4 steps, after optimizer.step(): how many host syncs in 8 steps?")
class PrintEvery4:
    @staticmethod
    def observe(run):
        from .. import perfmodel as pm
        syncs = [e for e in run.of(ev.HostSync) if e.reason == ".item()"]
        return {"item_syncs": len(syncs), "steps": len(run.of(ev.MarkStep)) // 2,
                "sync_wait_ms": round(pm.retime(run.events, "gaudi2").sync_wait_ns / 1e6, 3)}

    @staticmethod
    def judge(f, answer):
        if f["item_syncs"] in (0, f["steps"]):
            return not_changed(f"{f['item_syncs']} host syncs in {f['steps']} steps: print every 4 steps")
        return compare_answer(answer, f["item_syncs"], "host syncs",
                              f"one sync per print; on Gaudi 2's clock the host waited {f['sync_wait_ms']} ms in all "
                              "(after optimizer.step() the host traced the optimizer before asking: less to wait for)")


@exercise("07.4", "In section 12, replace steps[i] by steps[i].item(): how many compiles in the loop now?")
class ItemInsteadOfIndex:
    @staticmethod
    def observe(run):
        return {"loop_recipes": len({e.key for e in run.of(ev.Launch) if e.graph is not None
                                     and not any(n.op == "aten::linspace" for n in e.graph.nodes)}),
                "item_syncs": sum(1 for e in run.of(ev.HostSync) if e.reason == ".item()"),
                "iterations": len(run.of(ev.MarkStep)) - 1}

    @staticmethod
    def judge(f, answer):
        if not f["item_syncs"]:
            return not_changed("the loop reads steps[i] as a tensor: no .item()")
        return compare_answer(answer, f["loop_recipes"], "recipes the loop needs",
                              f"a Python float is a constant of the graph too: {f['loop_recipes']} recipes for "
                              f"{f['iterations']} iterations, and each .item() is a host sync "
                              f"({f['item_syncs']} of them): torch.roll is the fix")


@exercise("02.2", "In section 4, time seed 000's Net with batches of 200 and of 800 (lab.step_times, return "
          "{200: ..., 800: ...}): is it host-bound at 800 on the notebook's card?", "'host-bound' or 'device-bound'")
class SeedNetBound:
    @staticmethod
    def observe(run):
        from .timing import StepTimes
        v = run.value if isinstance(run.value, dict) else {}
        times = {b: t for b, t in v.items() if isinstance(t, StepTimes)}
        return {"verdicts": {b: t.verdict for b, t in times.items()},
                "host_ms": {b: round(t.host_ms, 3) for b, t in times.items()},
                "device_ms": {b: round(t.device_ms, 3) for b, t in times.items()}}

    @staticmethod
    def judge(f, answer):
        if set(f["verdicts"]) != {200, 800}:
            return not_changed("return {200: lab.step_times(...), 800: lab.step_times(...)} for seed 000's Net")
        v = f["verdicts"][800]
        return compare_answer(answer, v, "the verdict at batch 800",
                              f"the host's work is the same ops at any batch ({f['host_ms'][800]} ms modeled), the "
                              f"device's grows with it ({f['device_ms'][200]} -> {f['device_ms'][800]} ms): still far "
                              "from the host's")


@exercise("02.3", "In section 5, mark_step every 5 batches instead of every batch: how many graphs run in all "
          "(w's, the batches', the sum's), and what peak memory (MiB) do you get? Answer the graph count.")
class MarkEvery5:
    @staticmethod
    def observe(run):
        return {"graphs": len(run.of(ev.Launch)), "peak_mib": round(run.value / 2**20, 1)
                if isinstance(run.value, int) else None}

    @staticmethod
    def judge(f, answer):
        if f["graphs"] >= 30:
            return not_changed(f"{f['graphs']} graphs: one mark_step per batch")
        return compare_answer(answer, f["graphs"], "graphs launched",
                              f"w's graph, six for the 30 batches, the sum's: each batch graph's inputs (5 batches "
                              "of 4 MB) are alive until it "
                              f"runs, so the peak grows: {f['peak_mib']} MiB")


@exercise("02.4", "In section 6, remove the mark_step at the end of step_with_metric: how many graphs a step "
          "now?")
class NoFinalMarkStep:
    @staticmethod
    def observe(run):
        steps = max(len(run.value) if isinstance(run.value, list) else 4, 1)
        return {"graphs": len(run.of(ev.Launch)), "steps": steps,
                "triggers": sorted({e.trigger for e in run.of(ev.GraphBuilt)})}

    @staticmethod
    def judge(f, answer):
        per_step = f["graphs"] / f["steps"]
        if per_step == 2:
            return not_changed("two graphs a step: the static part, then the dynamic metric")
        return compare_answer(answer, per_step, "graphs a step",
                              "the metric's ops stay pending and join the next step's static graph at its "
                              f"mark_step (triggers: {', '.join(f['triggers'])}): one bigger graph a step, "
                              "recompiled for every n")


@exercise("03.4", "In section 6, halve the MLP's batch (pm.estimate of its lazy step, return {batch: estimate}) "
          "until it is host-bound: the largest host-bound batch on gaudi2?")
class WideBoundary:
    @staticmethod
    def observe(run):
        v = run.value if isinstance(run.value, dict) else {}
        verdicts = {b: e.verdict for b, e in v.items() if hasattr(e, "verdict")}
        host = [b for b, x in verdicts.items() if x == "host-bound"]
        dev = [b for b, x in verdicts.items() if x == "device-bound"]
        return {"verdicts": dict(sorted(verdicts.items())), "largest_host_bound": max(host) if host else None,
                "smallest_device_bound": min(dev) if dev else None}

    @staticmethod
    def judge(f, answer):
        h, d = f["largest_host_bound"], f["smallest_device_bound"]
        if h is None:
            return not_changed("no batch you tried is host-bound yet: halve it again")
        if d is None or d != 2 * h:
            return WRONG, f"bracket the boundary: estimate both {h} and {2 * h}"
        return compare_answer(answer, h, "the largest host-bound batch",
                              f"at {h} the host's work outlasts the device's, at {d} the device's outlasts the host's: below that, a replay "
                              "pays again (the host's work is the same at every batch)")


@exercise("05.1", "In section 1, append the static output itself (not .cpu()) to answers: how many different "
          "answers do you get?")
class StaticOutputAppended:
    @staticmethod
    def observe(run):
        import torch
        v = run.value if isinstance(run.value, list) else []
        distinct = []
        for a in v:
            a = a.cpu()
            if not any(torch.equal(a, d) for d in distinct):
                distinct.append(a)
        return {"replays": len(run.of(ev.Replay)), "answers": len(v), "distinct": len(distinct),
                "same_object": len({id(a) for a in v}) == 1 if v else False}

    @staticmethod
    def judge(f, answer):
        if not f["same_object"]:
            return not_changed("the answers are copies (.cpu()), one per replay")
        return compare_answer(answer, f["distinct"], "different answers",
                              f"all {f['answers']} entries are the graph's one static output, overwritten by each of "
                              f"the {f['replays']} replays: they all show the last one")


@exercise("05.4", "Give wrap_in_hpu_graph max_graphs=1 and serve the test set in batches of 64: how many "
          "captures, and is the last batch (5 images) replayed?")
class MaxGraphsOne:
    @staticmethod
    def observe(run):
        last = [i for i, e in enumerate(run.events) if isinstance(e, (ev.Replay, ev.CaptureEnd))]
        tail = run.events[last[-1] + 1:] if last else run.events
        return {"captures": len(run.of(ev.CaptureEnd)), "replays": len(run.of(ev.Replay)),
                "last_batch_traced_ops": sum(1 for e in tail if isinstance(e, ev.OpAccumulated))}

    @staticmethod
    def judge(f, answer):
        if f["captures"] == 2:
            return not_changed("two captures: one for 64 images, one for the last 5")
        return compare_answer(answer, f["captures"], "captures",
                              f"max_graphs=1: the batches of 64 use the one graph; the last batch is a new key beyond "
                              f"the cap, so it runs the plain forward in lazy mode ({f['last_batch_traced_ops']} ops "
                              "traced), not a replay")


@exercise("07.2", "In section 3, run batch 1600 with HPU_LAB_MEMORY_LIMIT set so that 800 fits but 1600 does not: "
          "which error do you get?", "the error's type name")
class MemoryLimit:
    expects_error = True

    @staticmethod
    def observe(run):
        return {"error": run.error, "error_type": run.error.split(":")[0] if run.error else None}

    @staticmethod
    def judge(f, answer):
        if not f["error"]:
            return not_changed("the run fits in the device's memory: lower HPU_LAB_MEMORY_LIMIT (hpu_lab.config.set)")
        return compare_answer(answer, f["error_type"], "the error",
                              f"the allocator refuses what the limit does not hold, with the bridge's message: "
                              f"{f['error'][:160]}")


@exercise("04.2", "In section 3, make module2 and module3 one module with an argument path and wrap it with "
          "ModuleCacher: how many graphs does it keep after both paths ran?")
class OneModuleTwoPaths:
    @staticmethod
    def observe(run):
        return {"graphs_held": run.value if isinstance(run.value, int) else None,
                "captures": len(run.of(ev.CaptureEnd)), "replays": len(run.of(ev.Replay))}

    @staticmethod
    def judge(f, answer):
        if f["graphs_held"] is None:
            return not_changed("return the merged module's module_cacher.num_graphs from your run")
        return compare_answer(answer, f["graphs_held"], "graphs the cacher keeps",
                              "path is a non-tensor argument, part of ModuleCacher's key: one graph per path, "
                              f"each captured once and replayed after ({f['captures']} captures, forward and backward "
                              f"of each, {f['replays']} "
                              "replays)")


@exercise("06.3", "In section 7, time a step of the small MLP with and without pipelining (lab.step_times, return "
          "{'plain': ..., 'pipelined': ...}): does pipelining make the step faster here? (True/False)",
          "True or False")
class PipeliningSmallMLP:
    @staticmethod
    def observe(run):
        from .timing import StepTimes
        v = run.value if isinstance(run.value, dict) else {}
        if not all(isinstance(v.get(k), StepTimes) for k in ("plain", "pipelined")):
            return {"speedup": None}
        return {"speedup": round(v["plain"].wall_ms / v["pipelined"].wall_ms, 3),
                "plain_ms": round(v["plain"].wall_ms, 3), "pipelined_ms": round(v["pipelined"].wall_ms, 3),
                "verdict": v["plain"].verdict, "card": v["plain"].card.name}

    @staticmethod
    def judge(f, answer):
        if f["speedup"] is None:
            return not_changed("return {'plain': lab.step_times(...), 'pipelined': lab.step_times(...)}")
        helps = f["speedup"] > 1.02
        return compare_answer(answer, helps, "whether pipelining helps",
                              f"on {f['card']} the step is {f['verdict']}: {f['plain_ms']} ms plain, "
                              f"{f['pipelined_ms']} ms pipelined (modeled). The extra mark_step launches the forward "
                              "early, but costs a graph, a lookup and a launch of host work, and the device had "
                              "little to do meanwhile" if not helps else
                              f"on {f['card']}: {f['plain_ms']} ms plain, {f['pipelined_ms']} ms pipelined (modeled): "
                              "the device runs the forward while the host traces the backward")
