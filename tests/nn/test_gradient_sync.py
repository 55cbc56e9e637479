"""distribute(model) as DDP at conversion (issue 23, traps 4 and 5): rank 0's parameters on every
rank, gradients summed in backward (exact under the loss rule, no double sum with sync_gradients,
parameters unused on a rank, accumulation over two backwards), a warning when the loss skipped
distributed_loss, and DDP refused unless opted out; in real gloo runs at P = 2..4."""
import copy
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as Fn
from layer_specs import F
from test_distribute_layers import make_graph
from test_distribute_models import labelled
from torch_geometric.nn import GATConv, GCNConv

from pyg_sparsecomm import LossNormalisationWarning, distribute, distributed_loss, shard, sync_gradients
from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.training.grad_registry import is_synced

C = 4


class Net(torch.nn.Module):
    """GCN + GAT, a parameter that a rank without rows does not use, one no rank uses."""

    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(F, 8)
        self.conv2 = GATConv(8, C, heads=2, concat=False)
        self.shift = torch.nn.Parameter(torch.randn(C))
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x, edge_index):
        out = self.conv2(self.conv1(x, edge_index).relu(), edge_index)
        return out + self.shift if x.size(0) > 0 else out   # P >= 3: the last rank owns no row


def step(model, opt, data, edge_index, distributed, plain_loss=False):
    opt.zero_grad()
    out = model(data.x, edge_index)
    m = data.train_mask
    if distributed and not plain_loss:
        loss = distributed_loss(Fn.cross_entropy, out[m], data.y[m])
    else:
        loss = Fn.cross_entropy(out[m], data.y[m])
    loss.backward()
    grads = {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()}
    opt.step()
    return float(loss.detach()), grads


def _unseeded_worker(rank, world_size, epochs):
    torch.manual_seed(1000 + rank)                   # as if unseeded: every rank draws its own init
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    local = shard(labelled(make_graph(world_size)))
    distribute(model)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = [step(model, opt, local, local.adj.with_value(None), True) for _ in range(epochs)]
    normalisation = [w for w in caught if issubclass(w.category, LossNormalisationWarning)]
    return before, initial, history, model.state_dict(), len(normalisation)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_unseeded_ranks_train_as_single_process_from_rank_zero(world_size):
    epochs = 8
    per_rank = launch(_unseeded_worker, world_size, epochs)
    before0, initial0 = per_rank[0][0], per_rank[0][1]
    assert not torch.equal(per_rank[1][0]["conv1.lin.weight"], before0["conv1.lin.weight"])  # ranks differed
    data = labelled(make_graph(world_size))
    ref = Net()
    ref.load_state_dict(before0)
    opt = torch.optim.Adam(ref.parameters(), lr=0.02, weight_decay=5e-4)
    ref_history = [step(ref, opt, data, data.edge_index, False) for _ in range(epochs)]
    for rank, (_, initial, history, final, warned) in enumerate(per_rank):
        assert warned == 0, f"rank {rank} warned although the loss went through distributed_loss"
        for k, v in initial0.items():
            assert torch.equal(initial[k], v), f"rank {rank}: {k} differs from rank 0's after distribute()"
            assert torch.equal(v, before0[k]), f"{k}: rank 0's parameters changed at distribute()"
        for (loss, grads), (ref_loss, ref_grads) in zip(history, ref_history, strict=True):
            assert abs(loss - ref_loss) < 1e-5, (rank, loss, ref_loss)
            for k, g in ref_grads.items():
                if g is None:
                    assert grads[k] is None, f"rank {rank}: {k} is unused everywhere but got a gradient"
                else:
                    torch.testing.assert_close(grads[k], g, rtol=1e-4, atol=1e-6, msg=f"rank {rank}: {k}")
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(final[k], v, rtol=1e-4, atol=1e-5, msg=f"rank {rank}: final {k}")


def _plain_loss_worker(rank, world_size):
    torch.manual_seed(0)
    model = distribute(Net())
    local = shard(labelled(make_graph(world_size)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            step(model, opt, local, local.adj.with_value(None), True, plain_loss=True)
    return [str(w.message) for w in caught if issubclass(w.category, LossNormalisationWarning)]


def test_plain_loss_warns_once_naming_the_fix():
    for messages in launch(_plain_loss_worker, 2):
        assert len(messages) == 1, messages
        assert "distributed_loss(F.cross_entropy" in messages[0]


def _double_sync_worker(rank, world_size):
    """The same step four ways: distribute() alone, + sync_gradients, distributed twice, and two
    half-losses accumulated over two backwards; each must give the single-process gradient."""
    local = shard(labelled(make_graph(world_size)))
    results = {}
    for how in ("alone", "plus_sync_gradients", "twice", "accumulated", "opt_out"):
        torch.manual_seed(0)
        model = Net()
        distribute(model.conv1)                     # a part first, then the whole model
        distribute(model, sync_gradients=how != "opt_out")
        if how == "twice":
            distribute(model)
        out = model(local.x, local.adj.with_value(None))
        m = local.train_mask
        loss = distributed_loss(Fn.cross_entropy, out[m], local.y[m])
        if how == "alone":   # autograd.grad: this rank's share, returned; p.grad untouched, nothing summed
            torch.autograd.grad(loss, list(model.parameters())[:2], retain_graph=True, allow_unused=True)
            assert all(p.grad is None for p in model.parameters())
            clone = copy.deepcopy(model)           # a copy is not synced: sync_gradients sums it
            assert not any(is_synced(p) for p in clone.parameters())
        with warnings.catch_warnings(record=True) as caught:  # every sync of the nested parts sees the loss normalised
            warnings.simplefilter("always")
            if how == "accumulated":
                (loss / 2).backward(retain_graph=True)
                (loss / 2).backward()
            else:
                loss.backward()
        assert not [w for w in caught if issubclass(w.category, LossNormalisationWarning)], (how, caught)
        if how in ("plus_sync_gradients", "opt_out"):
            sync_gradients(model)
        results[how] = {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()}
    return results


@pytest.mark.parametrize("world_size", [2, 3])
def test_sync_gradients_after_distribute_is_harmless(world_size):
    per_rank = launch(_double_sync_worker, world_size)
    data = labelled(make_graph(world_size))
    torch.manual_seed(0)
    ref = Net()
    out = ref(data.x, data.edge_index)
    Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    for results in per_rank:
        for how, grads in results.items():
            for k, p in ref.named_parameters():
                if p.grad is None:
                    assert grads[k] is None or (how == "opt_out" and not grads[k].any()), (how, k)
                else:
                    torch.testing.assert_close(grads[k], p.grad, rtol=1e-4, atol=1e-6, msg=f"{how}: {k}")


def _ddp_worker(rank, world_size, opt_out):
    torch.manual_seed(0)
    local = shard(labelled(make_graph(world_size)))
    model = distribute(Net(), sync_gradients=not opt_out)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=dist.new_group(backend="gloo"),
                                                    find_unused_parameters=True)
    out = ddp(local.x, local.adj.with_value(None))
    m = local.train_mask
    (distributed_loss(Fn.cross_entropy, out[m], local.y[m]) * world_size).backward()
    return model.conv1.lin.weight.grad.clone()


def test_ddp_wrapper_refused_unless_opted_out():
    with pytest.raises(RuntimeError, match=r"DistributedDataParallel.*sync_gradients=False"):
        launch(_ddp_worker, 2, False)
    grads = launch(_ddp_worker, 2, True)
    data = labelled(make_graph(2))
    torch.manual_seed(0)
    ref = Net()
    out = ref(data.x, data.edge_index)
    Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    for g in grads:
        torch.testing.assert_close(g, ref.conv1.lin.weight.grad, rtol=1e-4, atol=1e-6)


class LazyNet(torch.nn.Module):
    """A lazy layer (in_channels=-1), materialised in the first forward."""

    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(-1, 8)
        self.conv2 = GCNConv(8, C)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _lazy_worker(rank, world_size):
    torch.manual_seed(50 + rank)                      # every rank would materialise other values
    local = shard(labelled(make_graph(world_size)))
    model = distribute(LazyNet())
    out = model(local.x, local.adj.with_value(None))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    m = local.train_mask
    distributed_loss(Fn.cross_entropy, out[m], local.y[m]).backward()
    return state, {k: p.grad.clone() for k, p in model.named_parameters()}


def test_lazy_parameters_broadcast_and_synced_at_first_forward():
    per_rank = launch(_lazy_worker, 3)
    data = labelled(make_graph(3))
    ref = LazyNet()
    ref(data.x, data.edge_index)                      # materialise, then take rank 0's values
    ref.load_state_dict(per_rank[0][0])
    out = ref(data.x, data.edge_index)
    Fn.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    for rank, (state, grads) in enumerate(per_rank):
        for k, v in per_rank[0][0].items():
            assert torch.equal(state[k], v), f"rank {rank}: {k}"
        for k, p in ref.named_parameters():
            torch.testing.assert_close(grads[k], p.grad, rtol=1e-4, atol=1e-6, msg=f"rank {rank}: {k}")


def _backward_collectives(rank, world_size):
    from pyg_sparsecomm.testing.call_profile import CallProfile
    torch.manual_seed(0)
    model = distribute(Net())
    local = shard(labelled(make_graph(world_size)))
    counts = []
    for _ in range(2):
        out = model(local.x, local.adj.with_value(None))
        loss = distributed_loss(Fn.cross_entropy, out[local.train_mask], local.y[local.train_mask])
        with CallProfile() as profile:
            loss.backward()
        counts.append(dict(profile.collectives))
    return counts, len(model._sparsecomm_gradient_syncs[0].buckets)


@pytest.mark.parametrize("world_size", [2, 3])
def test_backward_sums_gradients_in_its_bucket_all_reduces_alone(world_size):
    """Which parameters some rank used (the last rank of P = 3 owns no row and skips ``shift``) travels
    in the buckets' all-reduces: backward issues one all-reduce per bucket and the halo's exchanges,
    no host all-reduce of its own (issue 56: one blocking round trip less per step)."""
    for rank, (counts, buckets) in enumerate(launch(_backward_collectives, world_size)):
        for seen in counts:
            assert seen.get("all_reduce", 0) == buckets, (rank, seen)
            assert set(seen) <= {"all_reduce", "all_to_all_single"}, (rank, seen)
