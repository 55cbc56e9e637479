"""Node classification with PyG's NeighborLoader on Cora.  neighbor.py is plain PyG in one process
(PyG's NeighborLoader needs pyg-lib or torch-sparse installed); neighbor_distributed.py is its port
(see README, "Mini-batch training"; `diff` the two files: the docstrings are the same), which
without torchrun runs on one process.

    python examples/porting/neighbor.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 2 examples/porting/neighbor_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GraphSAGE

import pyg_sparsecomm as psc
from pyg_sparsecomm.loader import DistributedNeighborLoader as NeighborLoader

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--dropout', type=float, default=0.5)
args = parser.parse_args()

dataset = Planetoid(args.root, 'Cora')
data = dataset[0]
train_idx = data.train_mask.nonzero().view(-1)
data = psc.partition_and_shard(data)

train_loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=32, input_nodes=train_idx,
                              shuffle=True, num_workers=0)
model = psc.distribute(GraphSAGE(dataset.num_features, 64, 2, dataset.num_classes, dropout=args.dropout))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    model.train()
    total_loss = 0
    for batch in train_loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = psc.distributed_loss(F.cross_entropy, out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    return total_loss / len(train_loader)


@torch.no_grad()
def test():
    model.eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    return [psc.global_accuracy(pred[m], data.y[m]) for m in (data.train_mask, data.val_mask, data.test_mask)]


for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, test_acc = test()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}')
