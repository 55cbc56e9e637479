"""Every entry of torch_geometric.nn.models has one verdict (nn/models/verdicts.py): exact (and tested
against PyG where the verdict says), refused by name at distribute() with the verdict's reason, or not a
model class; a class PyG adds fails here until it has one.  The README's table is rendered from it."""
import re
from pathlib import Path

import pytest
import torch
from torch_geometric.nn import GCNConv, GENConv, models
from torch_geometric.nn.models import LINKX, ARLinkPredictor, GroupAddRev, MetaLayer, MetaPath2Vec, SchNet, SignedGCN

from pyg_sparsecomm import distribute
from pyg_sparsecomm.nn import refusal
from pyg_sparsecomm.nn.models.verdicts import (
    EXACT,
    MODEL_VERDICTS,
    NOT_APPLICABLE,
    REFUSED,
    SUBMODULE_CLASSES,
    model_table,
)

README = Path(__file__).resolve().parents[2] / "README.md"


class _EdgeModel(torch.nn.Module):
    def forward(self, src, dst, edge_attr, u, batch):
        return edge_attr


#: refused classes built as a user would (the others, Node2Vec needing pyg-lib among them, are judged on
#: an uninitialised instance)
REFUSED_BUILDERS = {
    "MetaPath2Vec": lambda: MetaPath2Vec({("a", "to", "b"): torch.tensor([[0], [0]]),
                                          ("b", "to", "a"): torch.tensor([[0], [0]])}, embedding_dim=4,
                                         metapath=[("a", "to", "b"), ("b", "to", "a")], walk_length=2,
                                         context_size=2),
    "SignedGCN": lambda: SignedGCN(4, 8, num_layers=2),
    "GraphUNet": lambda: models.GraphUNet(4, 8, 3, depth=2),
    "SchNet": lambda: SchNet(hidden_channels=8, num_filters=8, num_interactions=1),
    "MetaLayer": lambda: MetaLayer(edge_model=_EdgeModel()),
    "ARLinkPredictor": lambda: ARLinkPredictor(4, 8),
}

#: exact classes built as a user would: distribute() accepts them
EXACT_BUILDERS = {
    "MLP": lambda: models.MLP([4, 8, 3], norm="batch_norm"),
    "JumpingKnowledge": lambda: models.JumpingKnowledge("lstm", channels=8, num_layers=2),
    "DeepGCNLayer": lambda: models.DeepGCNLayer(GENConv(8, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(),
                                                block="res+", ckpt_grad=True),
    "PMLP": lambda: models.PMLP(4, 8, 3, num_layers=2),
    "RECT_L": lambda: models.RECT_L(4, 8),
    "GPSENodeEncoder": lambda: models.GPSENodeEncoder(16, 8, 4, 4),
    "GroupAddRev": lambda: GroupAddRev(GCNConv(4, 4), num_groups=2),
    "LINKX": lambda: LINKX(20, 4, 8, 3, num_layers=2),
}


def test_every_class_of_the_module_has_a_verdict():
    """Fails when PyG adds a class (or a verdict names one PyG no longer has)."""
    missing = [name for name in models.__all__ if name not in MODEL_VERDICTS]
    assert not missing, f"torch_geometric.nn.models entries without a verdict in nn/models/verdicts.py: {missing}"
    stale = set(MODEL_VERDICTS) - set(models.__all__) - set(SUBMODULE_CLASSES)
    assert not stale, f"verdicts for names PyG does not have: {sorted(stale)}"
    for name, (verdict, text) in MODEL_VERDICTS.items():
        assert verdict in (EXACT, REFUSED, NOT_APPLICABLE) and text, name
        if verdict == NOT_APPLICABLE:
            assert not isinstance(getattr(models, name), type), f"{name} is a class: give it exact or refused"


def test_the_tests_a_verdict_cites_exist():
    root = README.parent
    for name, (_, text) in MODEL_VERDICTS.items():
        for cited in re.findall(r"tests/[\w/]+\.py", text):
            assert (root / cited).is_file(), f"{name}'s verdict cites {cited}, which does not exist"


@pytest.mark.parametrize("name", sorted(n for n, (v, _) in MODEL_VERDICTS.items() if v == REFUSED))
def test_refused_classes_are_refused_by_name_with_the_reason(name):
    reason = MODEL_VERDICTS[name][1]
    if name in REFUSED_BUILDERS:
        with pytest.raises(NotImplementedError, match=f"distribute\\(\\): {name} ") as info:
            distribute(REFUSED_BUILDERS[name]())
        assert reason in str(info.value)
    else:  # needs optional packages (or data) to be built: the class alone is refused
        module = __import__(SUBMODULE_CLASSES.get(name, "torch_geometric.nn.models"), fromlist=[name])
        cls = getattr(module, name)
        assert refusal(cls.__new__(cls)) == reason


def test_a_refused_class_inside_a_model_is_named():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gnn = models.GCN(4, 8, 2)
            self.unet = models.GraphUNet(4, 8, 3, depth=2)
    with pytest.raises(NotImplementedError, match="GraphUNet \\(unet\\)"):
        distribute(Net())


@pytest.mark.parametrize("name", sorted(EXACT_BUILDERS))
def test_exact_classes_are_accepted(name):
    assert MODEL_VERDICTS[name][0] == EXACT
    distribute(EXACT_BUILDERS[name]())


def test_readme_shows_the_generated_table():
    assert model_table() in README.read_text(), \
        "README's model table is stale: paste the output of `python -c \"from pyg_sparsecomm.nn.models import " \
        "model_table; print(model_table())\"`"
