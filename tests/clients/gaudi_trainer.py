"""optimum-habana's GaudiTrainer on a tiny BERT classifier built in code (no download), in lazy mode or
(--compile) with torch_compile and the hpu_backend; --cpu runs the same trainer with use_habana=False.
Prints the logged losses and the final parameters."""
import sys

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification
from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments


class Data(Dataset):
    def __init__(self, n=32):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (n, 12), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


cpu, compile_ = "--cpu" in sys.argv, "--compile" in sys.argv
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
args = GaudiTrainingArguments(
    output_dir="gaudi_trainer_out", use_habana=not cpu, use_lazy_mode=not (cpu or compile_),
    torch_compile=compile_ and not cpu, torch_compile_backend="hpu_backend" if compile_ and not cpu else None,
    per_device_train_batch_size=8, num_train_epochs=1, learning_rate=1e-3, logging_steps=1, report_to=[],
    save_strategy="no", seed=0, use_cpu=cpu)
trainer = GaudiTrainer(model=model, args=args, train_dataset=Data(),
                       gaudi_config=GaudiConfig(use_fused_adam=False, use_fused_clip_norm=False))
trainer.train()
print("LOSSES", [h["loss"] for h in trainer.state.log_history if "loss" in h])
print("PARAMS", [v.hex() for p in model.parameters() for v in p.detach().cpu().reshape(-1).tolist()])
