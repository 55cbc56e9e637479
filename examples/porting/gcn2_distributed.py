"""GCNII on Cora as PyG's examples/gcn2_cora.py writes it: the normalised edge weights live inside
``adj_t`` (``T.GCNNorm()`` + ``T.ToSparseTensor()``) and the ``GCN2Conv(normalize=False)`` layers
are called with ``adj_t``.  gcn2.py runs in one process, gcn2_distributed.py is its port to many
(``diff gcn2.py gcn2_distributed.py``; README, "Porting a PyG script").

    python examples/porting/gcn2.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 4 examples/porting/gcn2_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch.nn import Linear
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCN2Conv
from pyg_sparsecomm import distribute, distributed_loss, global_accuracy, partition_and_shard

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--num_layers', type=int, default=64)
parser.add_argument('--epochs', type=int, default=1000)
parser.add_argument('--dropout', type=float, default=0.6)
args = parser.parse_args()

transform = T.Compose([T.NormalizeFeatures(), T.GCNNorm(), T.ToSparseTensor()])
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
dataset = Planetoid(args.root, 'Cora', transform=transform)
data = partition_and_shard(dataset[0]).to(device)


class Net(torch.nn.Module):
    def __init__(self, hidden_channels, num_layers, alpha, theta,
                 shared_weights=True, dropout=0.0):
        super().__init__()

        self.lins = torch.nn.ModuleList()
        self.lins.append(Linear(dataset.num_features, hidden_channels))
        self.lins.append(Linear(hidden_channels, dataset.num_classes))

        self.convs = torch.nn.ModuleList()
        for layer in range(num_layers):
            self.convs.append(
                GCN2Conv(hidden_channels, alpha, theta, layer + 1,
                         shared_weights, normalize=False))

        self.dropout = dropout

    def forward(self, x, adj_t):
        x = F.dropout(x, self.dropout, training=self.training)
        x = x_0 = self.lins[0](x).relu()

        for conv in self.convs:
            x = F.dropout(x, self.dropout, training=self.training)
            x = conv(x, x_0, adj_t)
            x = x.relu()

        x = F.dropout(x, self.dropout, training=self.training)
        x = self.lins[1](x)

        return x.log_softmax(dim=-1)


model = distribute(Net(hidden_channels=64, num_layers=args.num_layers, alpha=0.1, theta=0.5, shared_weights=True, dropout=args.dropout)).to(device)
optimizer = torch.optim.Adam([
    dict(params=model.convs.parameters(), weight_decay=0.01),
    dict(params=model.lins.parameters(), weight_decay=5e-4)
], lr=0.01)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.adj_t)
    loss = distributed_loss(F.nll_loss, out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return float(loss)


@torch.no_grad()
def test():
    model.eval()
    pred, accs = model(data.x, data.adj_t).argmax(dim=-1), []
    for _, mask in data('train_mask', 'val_mask', 'test_mask'):
        accs.append(global_accuracy(pred[mask], data.y[mask]))
    return accs


best_val_acc = test_acc = 0
for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, tmp_test_acc = test()
    if val_acc > best_val_acc:
        best_val_acc = val_acc
        test_acc = tmp_test_acc
    print(f'Epoch: {epoch:04d}, Loss: {loss:.6f} Train: {train_acc:.4f}, '
          f'Val: {val_acc:.4f}, Test: {tmp_test_acc:.4f}, '
          f'Final Test: {test_acc:.4f}')
