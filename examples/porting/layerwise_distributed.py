"""Layer-wise inference with PyG's NeighborLoader on Cora, written as PyG's examples/reddit.py:
mini-batch training with a NeighborLoader, then inference layer by layer over every node, each
layer over batches of all in-edges (num_neighbors=[-1], shuffle=False) whose seed rows are
concatenated in order.  layerwise.py is plain PyG in one process (PyG's NeighborLoader needs
pyg-lib or torch-sparse installed); layerwise_distributed.py is its port (see README, "Mini-batch
training"; `diff` the two files: the docstrings are the same), which without torchrun runs on one
process.

    python examples/porting/layerwise.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 2 examples/porting/layerwise_distributed.py --root data/Planetoid
"""
import argparse
import copy

import torch
import torch.nn.functional as F
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import SAGEConv

import pyg_sparsecomm as psc
from pyg_sparsecomm.loader import DistributedNeighborLoader as NeighborLoader

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--dropout', type=float, default=0.5)
args = parser.parse_args()
device = torch.device('cpu')

dataset = Planetoid(args.root, 'Cora')
data = dataset[0]
data = psc.partition_and_shard(data)

kwargs = {'batch_size': 128, 'num_workers': 1, 'persistent_workers': True}
train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[10, 5], shuffle=True, **kwargs)
subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False, **kwargs)
# No need to maintain these features during evaluation:
del subgraph_loader.data.x, subgraph_loader.data.y
# Add global node index information:
subgraph_loader.data.num_nodes = data.num_nodes
subgraph_loader.data.n_id = torch.arange(data.num_nodes)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(in_channels, hidden_channels),
                                          SAGEConv(hidden_channels, out_channels)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=args.dropout, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all, subgraph_loader):
        # Representations layer by layer over all in-edges: each layer's rows once, in order
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.n_id.to(x_all.device)].to(device)
                x = conv(x, batch.edge_index.to(device))
                if i < len(self.convs) - 1:
                    x = x.relu_()
                xs.append(x[:batch.batch_size].cpu())
            x_all = torch.cat(xs, dim=0)
        return x_all


model = psc.distribute(SAGE(dataset.num_features, 64, dataset.num_classes).to(device))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    model.train()
    total_loss = 0
    for batch in train_loader:
        optimizer.zero_grad()
        y_hat = model(batch.x, batch.edge_index.to(device))[:batch.batch_size]
        loss = psc.distributed_loss(F.cross_entropy, y_hat, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += float(loss)
    return total_loss / len(train_loader)


@torch.no_grad()
def test():
    model.eval()
    y_hat = model.inference(data.x, subgraph_loader).argmax(dim=-1)
    y = data.y.to(y_hat.device)
    return [psc.global_accuracy(y_hat[m], y[m]) for m in (data.train_mask, data.val_mask, data.test_mask)]


for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, test_acc = test()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}')
