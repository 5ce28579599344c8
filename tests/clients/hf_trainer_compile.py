"""transformers' Trainer with torch_compile on the hpu_backend (the path optimum-habana's GaudiTrainer
takes with torch_compile=True: the model wrapped by torch.compile, trained by the Trainer loop through
accelerate), on a tiny BERT classifier built in code; --cpu runs it on CPU with dynamo's "eager"
backend. Prints the logged losses and the final parameters."""
import sys

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Data(Dataset):
    def __init__(self, n=32):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (n, 12), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


cpu = "--cpu" in sys.argv
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
args = TrainingArguments(output_dir="hf_trainer_out", use_cpu=cpu, torch_compile=True,
                         torch_compile_backend="eager" if cpu else "hpu_backend", per_device_train_batch_size=8,
                         num_train_epochs=1, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                         seed=0)
trainer = Trainer(model=model, args=args, train_dataset=Data())
trainer.train()
print("DEVICE", args.device.type)
print("LOSSES", [h["loss"] for h in trainer.state.log_history if "loss" in h])
print("PARAMS", [v.hex() for p in model.parameters() for v in p.detach().cpu().reshape(-1).tolist()])
