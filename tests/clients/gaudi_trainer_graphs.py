"""optimum-habana's own `use_hpu_graphs_for_training` against the line notebook 06 section 5 runs for it.

Three GaudiTrainer runs (lazy mode, a 2-layer BERT of hidden size 64 built in code, generated data) in
one process, each recorded from hpu_lab's event stream:
  flag  GaudiTrainingArguments(use_hpu_graphs_for_training=True), the model as built;
  line  use_hpu_graphs_for_training=False, the model wrapped by the notebook's line,
        htcore.hpu.ModuleCacher()(model=model, inplace=True), once GaudiTrainer is built (where the flag
        runs it, in `_wrap_model`: wrapped before, the model's forward takes **kwargs and transformers'
        Trainer passes it `num_items_in_batch`, which BERT's forward does not take);
  none  use_hpu_graphs_for_training=False, the model as built.
Prints one JSON object last: for each run whether the model GaudiTrainer trained carries a ModuleCacher,
its graph count, the HPU Graphs captured, the replays and forward ops traced by the host per step, the
logged losses and a hash of the trained parameters' bytes. Run under `python -m hpu_lab run` (tests/clients/test_clients.py).
"""
import hashlib
import json

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification
from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments

import habana_frameworks.torch.core as htcore
from hpu_lab import events as ev

STEPS = 4
FORWARD_OPS = ("aten::addmm", "aten::gelu", "aten::native_layer_norm", "aten::embedding")   # BERT's forward


class Data(Dataset):
    """Token ids with an attention mask, as a tokenizer gives them (without one, transformers reads the
    ids on the host to warn about padding: a `.item()`, which an HPU Graph capture refuses)."""

    def __init__(self, n=8 * STEPS):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (n, 12), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "attention_mask": torch.ones_like(self.x[i]), "labels": self.y[i]}


def train(flag, wrap):
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    args = GaudiTrainingArguments(
        output_dir="gaudi_trainer_graphs_out", use_habana=True, use_lazy_mode=True,
        use_hpu_graphs_for_training=flag, per_device_train_batch_size=8, max_steps=STEPS, learning_rate=1e-3,
        logging_steps=1, report_to=[], save_strategy="no", seed=0,
        remove_unused_columns=False)    # the data has only the model's inputs; its columns are not read from
                                        # model.forward's signature, which a ModuleCacher's wrapper hides
    trainer = GaudiTrainer(model=model, args=args, train_dataset=Data(),
                           gaudi_config=GaudiConfig(use_fused_adam=False, use_fused_clip_norm=False))
    if wrap:
        model = htcore.hpu.ModuleCacher()(model=model, inplace=True)      # notebook 06, section 5
    with ev.Collector() as c:
        trainer.train()
    cacher = getattr(trainer.model, "module_cacher", None)
    return {"wrapped": cacher is not None, "graphs": cacher.num_graphs if cacher is not None else 0,
            "captured": len(c.of(ev.CaptureEnd)), "replays_per_step": len(c.of(ev.Replay)) / STEPS,
            "forward_ops_per_step": sum(e.op in FORWARD_OPS for e in c.of(ev.OpAccumulated)) / STEPS,
            "steps": STEPS, "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            "params_sha256": hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes()
                                                     for p in model.parameters())).hexdigest()}


runs = {"flag": train(True, False), "line": train(False, True), "none": train(False, False)}
print("GRAPHS " + json.dumps(runs))
