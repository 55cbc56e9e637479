"""GCN on Cora as PyG's examples/gcn.py writes it: gcn.py runs in one process, gcn_distributed.py is
its port to many (``diff gcn.py gcn_distributed.py``; README, "Porting a PyG script").

    python examples/porting/gcn.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 4 examples/porting/gcn_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv
from pyg_sparsecomm import distribute, distributed_loss, global_accuracy, partition_and_shard

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--epochs', type=int, default=200)
parser.add_argument('--dropout', type=float, default=0.5)
args = parser.parse_args()

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
dataset = Planetoid(args.root, 'Cora', transform=T.NormalizeFeatures())
data = partition_and_shard(dataset[0]).to(device)


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels, cached=True)
        self.conv2 = GCNConv(hidden_channels, out_channels, cached=True)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=args.dropout, training=self.training)
        return self.conv2(x, edge_index)


model = distribute(GCN(dataset.num_features, 16, dataset.num_classes)).to(device)
optimizer = torch.optim.Adam([
    dict(params=model.conv1.parameters(), weight_decay=5e-4),
    dict(params=model.conv2.parameters(), weight_decay=0)
], lr=0.01)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index)
    loss = distributed_loss(F.cross_entropy, out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def test():
    model.eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    accs = []
    for mask in [data.train_mask, data.val_mask, data.test_mask]:
        accs.append(global_accuracy(pred[mask], data.y[mask]))
    return accs


for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, test_acc = test()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.6f}, Train: {train_acc:.4f}, '
          f'Val: {val_acc:.4f}, Test: {test_acc:.4f}')
