"""Deep Graph Infomax on Cora as PyG's examples/infomax_transductive.py writes it: dgi.py runs in one
process, dgi_distributed.py is its port to many (``diff dgi.py dgi_distributed.py``; README, "Models
that compute over all nodes").

    python examples/porting/dgi.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 4 examples/porting/dgi_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn as nn
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import DeepGraphInfomax, GCNConv
from pyg_sparsecomm import distribute, partition_and_shard

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--epochs', type=int, default=300)
parser.add_argument('--hidden', type=int, default=512)
args = parser.parse_args()

dataset = Planetoid(args.root, 'Cora')


class Encoder(nn.Module):
    def __init__(self, in_channels, hidden_channels):
        super().__init__()
        self.conv = GCNConv(in_channels, hidden_channels, cached=True)
        self.prelu = nn.PReLU(hidden_channels)

    def forward(self, x, edge_index):
        x = self.conv(x, edge_index)
        x = self.prelu(x)
        return x


def corruption(x, edge_index):
    return x[torch.randperm(x.size(0))], edge_index


device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
model = distribute(DeepGraphInfomax(
    hidden_channels=args.hidden, encoder=Encoder(dataset.num_features, args.hidden),
    summary=lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0)),
    corruption=corruption)).to(device)
data = partition_and_shard(dataset[0]).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)


def train():
    model.train()
    optimizer.zero_grad()
    pos_z, neg_z, summary = model(data.x, data.edge_index)
    loss = model.loss(pos_z, neg_z, summary)
    loss.backward()
    optimizer.step()
    return loss.item()


def test():
    model.eval()
    z, _, _ = model(data.x, data.edge_index)
    acc = model.test(z[data.train_mask], data.y[data.train_mask],
                     z[data.test_mask], data.y[data.test_mask], max_iter=150)
    return acc


for epoch in range(1, args.epochs + 1):
    loss = train()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}')
acc = test()
print(f'Accuracy: {acc:.4f}')
