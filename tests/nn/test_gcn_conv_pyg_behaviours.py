"""``DistributedGCNConv`` is a drop-in ``GCNConv``: PyG's documented ``GCNConv`` behaviours, run on
one process (no process group) against ``GCNConv`` with the same parameters.

Written from ``GCNConv``'s and ``MessagePassing``'s documentation: graph given as ``edge_index``
or as a transposed sparse adjacency ``adj_t`` (torch CSR, CSC transposed, COO), edge weights,
``cached``, ``decomposed_layers``, static graphs ``x[B, N, F]``, sparse ``x``, ``flow`` and
PyG's ``Explainer``.  The repr differs on purpose (it names the algorithm).
"""
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.nn import GCNConv, MessagePassing
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard

N, IN, OUT = 7, 8, 6
# directed, one isolated node (6), a duplicate-free edge set
EDGE_INDEX = torch.tensor([[0, 0, 0, 1, 2, 3, 4, 5, 1],
                           [1, 2, 3, 0, 0, 0, 5, 4, 3]])


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(N, IN, generator=gen)
    weight = torch.rand(EDGE_INDEX.size(1), generator=gen) + 0.5
    return x, weight


def _pair(**kwargs):
    """``GCNConv`` and ``DistributedGCNConv`` built with ``kwargs``, holding the same parameters
    (a random bias: a zero one would test nothing)."""
    torch.manual_seed(0)
    ref = GCNConv(IN, OUT, **kwargs)
    if ref.bias is not None:
        torch.nn.init.normal_(ref.bias)
    ours = DistributedGCNConv(IN, OUT, **kwargs)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _adj_t(form, weight=None):
    """The transposed adjacency (``adj_t[i, j]``: an edge ``j -> i``) in one of PyG's sparse forms."""
    if form == "csr":
        return to_torch_csr_tensor(EDGE_INDEX.flip(0), weight, size=(N, N))
    if form == "csc_t":  # PyG's own idiom: the CSC adjacency, transposed (a CSR view)
        return to_torch_csc_tensor(EDGE_INDEX, weight, size=(N, N)).t()
    if form == "coo":
        return to_torch_coo_tensor(EDGE_INDEX.flip(0), weight, size=(N, N))
    raise AssertionError(form)


def _outputs_and_grads(conv, x, *graph):
    x = x.clone().requires_grad_()
    out = conv(x, *graph)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    grads = [x.grad] + [p.grad for p in conv.parameters()]
    conv.zero_grad()
    return out.detach(), grads


# -- no PyG attribute shadowed ---------------------------------------------------------------


def _kind(attr):
    for kind in (property, staticmethod, classmethod):
        if isinstance(attr, kind):
            return kind.__name__
    return "method" if inspect.isfunction(attr) else "data"


def _public(cls):
    return {name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")}


#: ``GCNConv`` methods ``DistributedGCNConv`` overrides, on purpose: ``reset_parameters`` also clears
#: what the distributed runtime cached (the SpMM, stale halos).  The forward is ``GCNConv``'s: the
#: runtime of ``distribute()`` runs it on a shard.
DELIBERATE_OVERRIDES = {"reset_parameters"}


def _defines(cls, name):
    """``cls`` itself defines ``name`` with its own behaviour: not PyG's generic
    ``MessagePassing`` attribute, nor what PyG compiles per class (``propagate``, ``collect``)."""
    attr = vars(cls).get(name)
    if attr is None or attr is inspect.getattr_static(MessagePassing, name, None):
        return False
    return not getattr(attr, "__module__", "").startswith(f"{cls.__module__}_{cls.__name__}")


def test_no_public_attribute_of_gcnconv_is_shadowed():
    """Every public name of ``GCNConv`` (hence of ``MessagePassing``) keeps its kind (a property
    stays a property: PyG reads ``conv.explain`` as a flag), only the deliberate methods are
    overridden, and the attributes ``DistributedGCNConv`` adds name nothing PyG has."""
    assert issubclass(GCNConv, MessagePassing)
    base, ours = _public(GCNConv), _public(DistributedGCNConv)
    changed = {name: (_kind(attr), _kind(ours[name])) for name, attr in base.items()
               if _kind(ours[name]) != _kind(attr)}
    assert changed == {}
    overridden = {name for name in base if _defines(DistributedGCNConv, name)}
    assert overridden == DELIBERATE_OVERRIDES

    ref, conv = GCNConv(IN, OUT), DistributedGCNConv(IN, OUT)
    added = {name for name in set(dir(conv)) - set(dir(ref)) if not name.startswith("_")}
    assert added and not added & set(base)
    assert not conv.explain  # PyG's explain flag: off until an Explainer sets it
    assert conv.explain_algorithm().startswith("algorithm='1d'")


# -- graph forms and edge weights --------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR format")  # PyG's, for the COO form on purpose
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("form", ["edge_index", "csr", "csc_t", "coo"])
def test_graph_forms_and_edge_weights(form, weighted):
    x, weight = _inputs()
    w = weight if weighted else None
    graph = (EDGE_INDEX, w) if form == "edge_index" else (_adj_t(form, w),)
    ref, ours = _pair()
    expected, expected_grads = _outputs_and_grads(ref, x, *graph)
    out, grads = _outputs_and_grads(ours, x, *graph)
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=False):
        torch.testing.assert_close(got, want)
    # every form gives the edge_index result (PyG's documented equivalence)
    torch.testing.assert_close(out, ref(x, EDGE_INDEX, w).detach(), atol=1e-6, rtol=1e-5)
    assert out.shape == (N, OUT)


def test_a_csc_adj_t_fails_as_in_gcnconv():
    """``gcn_norm`` refuses a CSC ``adj_t``; the drop-in raises the same error, not another one."""
    x, _ = _inputs()
    adj_t = to_torch_csc_tensor(EDGE_INDEX.flip(0), size=(N, N))
    ref, ours = _pair()
    with pytest.raises(Exception) as expected:
        ref(x, adj_t)
    with pytest.raises(type(expected.value), match="CSC"):
        ours(x, adj_t)


def test_without_normalisation_or_bias():
    x, weight = _inputs()
    for kwargs in (dict(normalize=False), dict(bias=False), dict(improved=True),
                   dict(add_self_loops=False)):
        ref, ours = _pair(**kwargs)
        torch.testing.assert_close(ours(x, EDGE_INDEX, weight), ref(x, EDGE_INDEX, weight))


# -- cached, decomposed_layers -----------------------------------------------------------------


@pytest.mark.parametrize("form", ["edge_index", "csr"])
def test_cached_normalisation_is_reused(form):
    """``cached=True``: the normalised graph of the first call serves every later call (so a
    second call with another graph still uses the first one), until ``reset_parameters``."""
    x, _ = _inputs()
    graph = EDGE_INDEX if form == "edge_index" else _adj_t("csr")
    other = EDGE_INDEX[:, :3] if form == "edge_index" else to_torch_csr_tensor(
        EDGE_INDEX[:, :3].flip(0), size=(N, N))
    ref, ours = _pair(cached=True)
    first = ref(x, graph)
    torch.testing.assert_close(ours(x, graph), first)
    assert ours._cached_edge_index is not None
    torch.testing.assert_close(ours(x, other), first)  # the cache, not `other`, was used
    torch.testing.assert_close(ours(x, other), ref(x, other))

    state = {k: v.clone() for k, v in ours.state_dict().items()}
    ours.reset_parameters()
    ours.load_state_dict(state)
    assert ours._cached_edge_index is None
    uncached = GCNConv(IN, OUT)
    uncached.load_state_dict(state)
    torch.testing.assert_close(ours(x, other), uncached(x, other))


def test_decomposed_layers():
    """``decomposed_layers=2`` splits the feature dimension of the messages into two chunks:
    same result as one layer (memory, not numbers, changes)."""
    x, weight = _inputs()
    ref, ours = _pair(decomposed_layers=2)
    assert ours.decomposed_layers == 2
    messages = []
    ours.register_message_forward_hook(lambda module, inputs, out: messages.append(out.shape))
    ours(x, EDGE_INDEX)
    assert messages == [(EDGE_INDEX.size(1) + N, OUT // 2)] * 2  # two chunks of the features
    one = GCNConv(IN, OUT)
    one.load_state_dict(ref.state_dict())
    for w in (None, weight):
        torch.testing.assert_close(ours(x, EDGE_INDEX, w), ref(x, EDGE_INDEX, w))
        torch.testing.assert_close(ours(x, EDGE_INDEX, w), one(x, EDGE_INDEX, w))
    ours.decomposed_layers = 3  # set after construction, as PyG allows
    torch.testing.assert_close(ours(x, EDGE_INDEX), one(x, EDGE_INDEX))


# -- inputs: static graphs, sparse x, flow --------------------------------------------------------


def test_static_graph_batched_features():
    """``x`` of shape ``[B, N, F]`` (node_dim=-2): one graph, ``B`` feature sets."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, N, IN, generator=gen)
    ref, ours = _pair()
    out = ours(x, EDGE_INDEX)
    assert out.shape == (3, N, OUT)
    torch.testing.assert_close(out, ref(x, EDGE_INDEX))
    for b in range(3):
        torch.testing.assert_close(out[b], ours(x[b], EDGE_INDEX))


def test_sparse_node_features():
    x, _ = _inputs()
    x[x.abs() < 0.8] = 0
    ref, ours = _pair()
    out = ours(x.to_sparse(), EDGE_INDEX)
    torch.testing.assert_close(out, ref(x.to_sparse(), EDGE_INDEX))
    torch.testing.assert_close(out, ours(x, EDGE_INDEX))


def test_flow_target_to_source():
    """``flow="target_to_source"`` with the reversed edges computes the default flow's result."""
    x, weight = _inputs()
    ref, ours = _pair(flow="target_to_source")
    reversed_edges = EDGE_INDEX.flip(0)
    out = ours(x, reversed_edges, weight)
    torch.testing.assert_close(out, ref(x, reversed_edges, weight))
    default = DistributedGCNConv(IN, OUT)
    default.load_state_dict(ours.state_dict())
    torch.testing.assert_close(out, default(x, EDGE_INDEX, weight))
    with pytest.raises(ValueError, match="target_to_source"):  # as in MessagePassing
        ours(x, _adj_t("csr"))


# -- PyG's Explainer ----------------------------------------------------------------------------


class _Net(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return F.log_softmax(self.conv(x, edge_index), dim=-1)


def _explain(conv, x, node):
    explainer = Explainer(_Net(conv), algorithm=GNNExplainer(epochs=20, lr=0.05),
                          explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="log_probs"))
    torch.manual_seed(5)  # GNNExplainer draws its initial masks
    return explainer(x, EDGE_INDEX, index=node)


def test_explainer_gives_gcnconv_masks():
    """PyG's ``Explainer`` switches the layer into explain mode (``conv.explain = True``), masks
    its messages and trains the masks: the same masks as for ``GCNConv``, explain mode off after."""
    x, _ = _inputs()
    ref, ours = _pair()
    expected, got = _explain(ref, x, node=0), _explain(ours, x, node=0)
    torch.testing.assert_close(got.edge_mask, expected.edge_mask)
    torch.testing.assert_close(got.node_mask, expected.node_mask)
    assert float(got.edge_mask.abs().sum()) > 0  # the edge mask received gradients
    assert not ours.explain and ours._edge_mask is None
    torch.testing.assert_close(ours(x, EDGE_INDEX), ref(x, EDGE_INDEX))


def test_explain_mode_over_a_shard_is_refused():
    """The Explainer masks the edges of the whole graph; a shard's layer would silently ignore
    the mask, so explain mode on a ``HaloAdj`` raises, naming the fix."""
    x, _ = _inputs()
    from torch_geometric.data import Data
    data = SparsityAwarePartitioner(1, "contiguous")(Data(x=x, edge_index=EDGE_INDEX))
    local = shard(data, rank=0, world_size=1)
    _, ours = _pair()
    torch.testing.assert_close(ours(local.x, local.adj), ours(x, EDGE_INDEX))
    ours.explain = True
    with pytest.raises(ValueError, match="explain on one process"):
        ours(local.x, local.adj)
