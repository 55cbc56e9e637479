"""GAT on Cora as PyG's examples/gat.py writes it: gat.py runs in one process, gat_distributed.py is
its port to many (``diff gat.py gat_distributed.py``; README, "Porting a PyG script").

    python examples/porting/gat.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 4 examples/porting/gat_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GATConv
from pyg_sparsecomm import distribute, distributed_loss, global_accuracy, partition_and_shard

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--hidden_channels', type=int, default=8)
parser.add_argument('--heads', type=int, default=8)
parser.add_argument('--lr', type=float, default=0.005)
parser.add_argument('--epochs', type=int, default=200)
parser.add_argument('--dropout', type=float, default=0.6)
args = parser.parse_args()

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
dataset = Planetoid(args.root, 'Cora', transform=T.NormalizeFeatures())
data = partition_and_shard(dataset[0]).to(device)


class GAT(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, heads):
        super().__init__()
        self.conv1 = GATConv(in_channels, hidden_channels, heads, dropout=args.dropout)
        # On the Pubmed dataset, use `heads` output heads in `conv2`.
        self.conv2 = GATConv(hidden_channels * heads, out_channels, heads=1,
                             concat=False, dropout=args.dropout)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv2(x, edge_index)
        return x


model = distribute(GAT(dataset.num_features, args.hidden_channels, dataset.num_classes, args.heads)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)


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


best_val_acc = test_acc = 0
for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, tmp_test_acc = test()
    if val_acc > best_val_acc:
        best_val_acc = val_acc
        test_acc = tmp_test_acc
    print(f'Epoch: {epoch:03d}, Loss: {loss:.6f}, Train: {train_acc:.4f}, '
          f'Val: {val_acc:.4f}, Test: {test_acc:.4f}')
