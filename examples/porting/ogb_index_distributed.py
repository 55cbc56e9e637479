"""GraphSAGE on Cora as OGB's node-property scripts write it (ogbn-products' gnn.py): the splits are a
``split_idx`` dict of index tensors, the model is scored as ``out[train_idx]`` and by an ``Evaluator``.
ogb_index.py runs in one process, ogb_index_distributed.py is its port to many
(``diff ogb_index.py ogb_index_distributed.py``; README, "Porting a PyG script").

OGB is not needed and nothing downloads: ``get_idx_split`` returns Cora's split as OGB's
``dataset.get_idx_split()`` returns its own (a dict of index tensors), and ``Evaluator`` scores as
``ogb.nodeproppred.Evaluator('ogbn-products')`` does (labels and predictions of shape ``[n, 1]``).

    python examples/porting/ogb_index.py --root data/Planetoid
    torchrun --standalone --nproc-per-node 4 examples/porting/ogb_index_distributed.py --root data/Planetoid
"""
import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import SAGEConv
from pyg_sparsecomm import GlobalEvaluator, distribute, distributed_loss, partition_and_shard, shard_index

parser = argparse.ArgumentParser()
parser.add_argument('--root', default='data/Planetoid')
parser.add_argument('--num_layers', type=int, default=3)
parser.add_argument('--dropout', type=float, default=0.5)
parser.add_argument('--lr', type=float, default=0.01)
parser.add_argument('--epochs', type=int, default=200)
args = parser.parse_args()


def get_idx_split(data):
    """OGB's ``dataset.get_idx_split()``: the node ids of each split, here Cora's."""
    return {'train': data.train_mask.nonzero().view(-1), 'valid': data.val_mask.nonzero().view(-1),
            'test': data.test_mask.nonzero().view(-1)}


class Evaluator:
    """OGB's ``Evaluator('ogbn-products')``: the accuracy of ``y_pred`` against ``y_true``, both ``[n, 1]``,
    read as OGB reads them (``.detach().cpu().numpy()``)."""

    def eval(self, input_dict):
        y_true, y_pred = (input_dict[key].detach().cpu().numpy() for key in ('y_true', 'y_pred'))
        return {'acc': float((y_true == y_pred).sum()) / max(len(y_true), 1)}


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers, dropout):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(in_channels, hidden_channels)])
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for conv in self.convs[:-1]:
            x = F.relu(conv(x, edge_index))
            x = F.dropout(x, p=self.dropout, training=self.training)
        return self.convs[-1](x, edge_index).log_softmax(dim=-1)


def train(model, data, train_idx, optimizer):
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index)[train_idx]
    loss = distributed_loss(F.nll_loss, out, data.y.squeeze(1)[train_idx])
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def test(model, data, split_idx, evaluator):
    model.eval()
    out = model(data.x, data.edge_index)
    y_pred = out.argmax(dim=-1, keepdim=True)
    return [evaluator.eval({'y_true': data.y[split_idx[split]], 'y_pred': y_pred[split_idx[split]]})['acc']
            for split in ['train', 'valid', 'test']]


device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
dataset = Planetoid(args.root, 'Cora', transform=T.NormalizeFeatures())
data = partition_and_shard(dataset[0])
data.y = data.y.view(-1, 1)  # OGB's labels are [num_nodes, 1]
data = data.to(device)
split_idx = shard_index(get_idx_split(dataset[0]), data)
train_idx = split_idx['train'].to(device)

model = distribute(SAGE(dataset.num_features, 64, dataset.num_classes, args.num_layers, args.dropout)).to(device)
evaluator = GlobalEvaluator(Evaluator())
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
for epoch in range(1, args.epochs + 1):
    loss = train(model, data, train_idx, optimizer)
    train_acc, valid_acc, test_acc = test(model, data, split_idx, evaluator)
    print(f'Epoch: {epoch:02d}, Loss: {loss:.6f}, Train: {train_acc:.4f}, Val: {valid_acc:.4f}, '
          f'Test: {test_acc:.4f}')
