"""Notebook 01, section 3: seed 000's model under torch.compile(backend="hpu_backend"), the loss outside
it, in an eager-mode process (PT_HPU_LAZY_MODE=0)."""
from theory_prelude import F, ev, nn, report, torch


class Net(nn.Module):                 # the model of seed 000, verbatim
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


model = Net().to("hpu").eval()            # eval: no dropout noise
compiled = torch.compile(model, backend="hpu_backend")


def train_function(data, target):
    output = compiled(data)
    loss = F.nll_loss(output, target)     # not wrapped: eager
    return loss


batches = [(torch.randn(32, 1, 28, 28).to("hpu"), torch.randint(0, 10, (32,)).to("hpu")) for _ in range(5)]
with ev.Collector() as c:
    for data, target in batches:
        loss = train_function(data, target)
    loss_value = loss.item()
report(compiles=[e.node_count for e in c.of(ev.Compile)], launches=len(c.of(ev.Launch)),
       eager_ops=len(c.of(ev.OpAccumulated)), loss=round(loss_value, 3))
