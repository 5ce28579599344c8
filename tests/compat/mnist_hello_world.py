"""The Model-References hello-world MNIST training loop, as Gaudi users write it.

Run on hpu_lab:   python -m hpu_lab run tests/compat/mnist_hello_world.py --hpu
Same on the CPU:  python -m hpu_lab run tests/compat/mnist_hello_world.py
(torchvision's MNIST download is replaced by hpu_lab.lab.data.MNISTLike: the only change.)
"""
from __future__ import print_function

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

import habana_frameworks.torch.core as htcore
import habana_frameworks.torch.utils.debug as htdebug  # noqa: F401  (imported by the real example)

from hpu_lab.lab.data import MNISTLike


class Net(nn.Module):
    def __init__(self, use_autocast=False):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(1936, 32)
        self.fc2 = nn.Linear(32, 10)
        self._use_autocast = use_autocast

    def forward(self, x):
        with torch.autocast("hpu", dtype=torch.bfloat16, enabled=self._use_autocast):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 3, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.dropout2(x)
            x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(args, model, device, train_loader, optimizer, epoch, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        if args.hpu:
            htcore.mark_step()
        optimizer.step()
        if args.hpu:
            htcore.mark_step()
        if batch_idx % args.log_interval == 0:
            losses.append(loss.item())
            print('Train Epoch: {} [{}/{}]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset), loss.item()))


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print('Test set: Average loss: {:.4f}, Accuracy: {}/{}'.format(test_loss, correct, len(test_loader.dataset)))
    return test_loss, correct


def main():
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--gamma', type=float, default=0.7)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--log-interval', type=int, default=4)
    parser.add_argument('--hpu', action='store_true', default=False, help='Use hpu device')
    parser.add_argument('--samples', type=int, default=256)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("hpu") if args.hpu else torch.device("cpu")

    full = MNISTLike(train=True)
    train_set = torch.utils.data.Subset(full, range(args.samples))
    test_set = torch.utils.data.Subset(full, range(args.samples, args.samples + 64))
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=64)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    losses = []
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, losses)
        test_loss, correct = test(model, device, test_loader)
        scheduler.step()
    print("RESULT", json.dumps({"losses": losses, "test_loss": test_loss, "correct": correct}))


if __name__ == '__main__':
    main()
