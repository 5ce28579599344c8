"""The exercises of notebooks 06 and 08 that exercises.py does not hold (registered on import, as
there; reference answers: answers/late.py)."""
from __future__ import annotations

from .. import events as ev
from .exercises import _batch_sizes, _big_launch_keys
from .practice import WRONG, Run, compare_answer, exercise, not_changed


@exercise("06.1", "In section 2, use batch_size=200 for the loader without padding: how many forward+backward "
          "recipes does its epoch need?")
class LastBatch200:
    @staticmethod
    def observe(run: Run):
        sizes = _batch_sizes(run)
        return {"batch_sizes": sorted(set(sizes)), "last_batch": sizes[-1] if sizes else None,
                "forward_backward_recipes": len(_big_launch_keys(run))}

    @staticmethod
    def judge(f, answer):
        if len(f["batch_sizes"]) > 1:
            return not_changed(f"batches of {f['batch_sizes']}: the last one is smaller, so its graph is another recipe")
        return compare_answer(answer, f["forward_backward_recipes"], "forward+backward recipes",
                              f"1600 = 8 x 200: every batch, the last included, has {f['last_batch']} images, so one "
                              "shape and one recipe: padding and drop_last have nothing left to fix")


def _optimizer_graph(run: Run):
    """The last launched graph of the run that holds the optimizer's update (AdamW's addcdiv)."""
    graphs = [e.graph for e in run.of(ev.Launch) if e.graph is not None
              and any(n.op == "aten::addcdiv" for n in e.graph.nodes)]
    return graphs[-1] if graphs else None


@exercise("06.2", "In section 4, move optimizer.step() out of hmp.disable_casts() (AdamW): what dtype do the "
          "parameters have after the step?", "a dtype name, such as 'bfloat16'")
class StepOutsideDisableCasts:
    @staticmethod
    def observe(run: Run):
        import torch
        g = _optimizer_graph(run)
        params = list(run.value.parameters()) if isinstance(run.value, torch.nn.Module) else []
        return {"parameter_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
                "update_bf16_ops": None if g is None else sum(
                    1 for n in g.nodes if n.dtype == "bfloat16" and not n.is_cast and n.op not in ("input", "output", "view")),
                "update_casts": None if g is None else sum(1 for n in g.nodes if n.is_cast)}

    @staticmethod
    def judge(f, answer):
        if f["update_bf16_ops"] is None or not f["parameter_dtypes"]:
            return WRONG, "run one step with AdamW under hmp.convert and return the model"
        if f["update_bf16_ops"] == 0:
            return not_changed("the update runs under hmp.disable_casts(): all of it in float32")
        dtype = "/".join(f["parameter_dtypes"])
        return compare_answer(answer, dtype, "the parameters' dtype",
                              f"the weights stay {dtype}: AdamW writes them in place, and an in-place op keeps its "
                              f"target's dtype. But HMP now casts the update itself: {f['update_bf16_ops']} of its ops "
                              f"ran in bfloat16 ({f['update_casts']} casts in the optimizer's graph), so each update "
                              "lost precision before it reached the fp32 weights. That is what disable_casts() prevents")


# -- notebook 08: the cards' reports ({rank: report}, what launch() returns) ------------------------------
def _reports(run: Run) -> dict:
    v = run.value
    if not (isinstance(v, dict) and v and all(isinstance(r, dict) for r in v.values())):
        raise ValueError("return launch(...)'s reports, {rank: report}, from your run")
    return v


@exercise("08.1", "In section 3, launch buckets on 3 cards: how many all-reduces a step does DDP with 50 KB "
          "buckets make after the first step?")
class BucketsOnThreeCards:
    @staticmethod
    def observe(run: Run):
        v = _reports(run)
        per_step = v[min(v)]["ddp_50KB"]["all_reduce_per_step"]
        return {"cards": len(v), "ddp_50KB_all_reduce_per_step": per_step,
                "cards_agree": len({r["ddp_50KB"]["checksum"] for r in v.values()}) == 1}

    @staticmethod
    def judge(f, answer):
        if f["cards"] == 2:
            return not_changed("two cards: launch it with cards=3")
        return compare_answer(answer, f["ddp_50KB_all_reduce_per_step"][-1], "all-reduces a step",
                              f"on {f['cards']} cards as on 2: a bucket holds 50 KB of gradients whatever the number of "
                              "cards, so the model's 150 KB make the same buckets and the same all-reduces; only what "
                              "each all-reduce sums grows (one gradient more per card)")


@exercise("08.2", "In section 3, give fast_ddp fusion_buffer_dtype=torch.bfloat16 (launch 'buckets bfloat16'): "
          "are its weights still DDP's, to within 1e-5 of their sum? (True/False)", "True or False")
class FastDDPBfloat16:
    @staticmethod
    def observe(run: Run):
        v = _reports(run)
        r0 = v[min(v)]
        return {"fusion_dtype": r0["fast_ddp"].get("fusion_dtype", "float32"),
                "fast_ddp_minus_ddp": r0["fast_ddp"]["checksum"] - r0["ddp_25MB"]["checksum"],
                "cards_agree": len({r["fast_ddp"]["checksum"] for r in v.values()}) == 1}

    @staticmethod
    def judge(f, answer):
        if f["fusion_dtype"] != "bfloat16":
            return not_changed(f"fast_ddp's buffer is {f['fusion_dtype']}: launch 'buckets bfloat16'")
        same = abs(f["fast_ddp_minus_ddp"]) <= 1e-5
        return compare_answer(answer, same, "whether fast_ddp's weights are DDP's",
                              f"the gradients are rounded to bfloat16 (8 bits of mantissa) before they are summed: the "
                              f"sum of the weights moves by {f['fast_ddp_minus_ddp']:.2e} from DDP's after three steps. "
                              f"The cards {'still agree with each other exactly' if f['cards_agree'] else 'disagree'}: "
                              "each gets the same rounded sum")


@exercise("08.3", "In section 4, make the layer column-parallel (each card computes its share of the outputs, then "
          "all_gather): does it capture in an HPU Graph with lazy collectives, with correct answers? (True/False)",
          "True or False")
class ColumnParallel:
    @staticmethod
    def observe(run: Run):
        v = _reports(run)
        r0 = v[min(v)]
        return {"layer": r0.get("layer"), "error": r0.get("error"),
                "captures": [r.get("captures") for r in v.values()],
                "correct": all(r.get("correct") for r in v.values())}

    @staticmethod
    def judge(f, answer):
        if not f["layer"] or "row" in f["layer"].lower():
            return not_changed(f"the layer is {f['layer']}: write a column-parallel one and launch it")
        if f["error"] and "PT_HPU_ENABLE_LAZY_COLLECTIVES" in f["error"]:
            return WRONG, ("the capture failed without lazy collectives, as section 4 showed for all_reduce: launch "
                           "with PT_HPU_ENABLE_LAZY_COLLECTIVES='true'")
        captured = f["error"] is None and all(c == 1 for c in f["captures"]) and f["correct"]
        return compare_answer(answer, captured, "whether it captures, with correct answers",
                              "with lazy collectives all_gather is a node of the captured graph, as all_reduce is: "
                              "one capture on each card, then replays, each answer the full layer's"
                              if captured else f"the run says: {f['error']}")
