"""One ranking-metric API (issue 57): the ``global_*_at_k`` functions are deprecated aliases of the
``DistributedLinkPred*`` classes: each warns, naming its class, and returns the class's value (one process;
tests/link/test_ranking.py checks both against PyG at P = 1..3)."""
import pytest
import torch
import torch_geometric.metrics as pyg_metrics

from pyg_sparsecomm import link

K = 3
#: function -> the class it is an alias of
ALIASES = {"global_precision_at_k": "DistributedLinkPredPrecision", "global_recall_at_k": "DistributedLinkPredRecall",
           "global_ndcg_at_k": "DistributedLinkPredNDCG", "global_mrr_at_k": "DistributedLinkPredMRR",
           "global_hit_ratio_at_k": "DistributedLinkPredHitRatio", "global_map_at_k": "DistributedLinkPredMAP"}


def _data():
    gen = torch.Generator().manual_seed(0)
    pred = torch.stack([torch.randperm(9, generator=gen)[:K] for _ in range(6)])
    truth = torch.stack([torch.randint(0, 6, (12,), generator=gen), torch.randint(0, 9, (12,), generator=gen)])
    return pred, truth


@pytest.mark.parametrize("function", sorted(ALIASES))
def test_a_ranking_function_warns_naming_its_class_and_gives_its_value(function):
    pred, truth = _data()
    with pytest.warns(DeprecationWarning, match=f"link.{function} is deprecated.*{ALIASES[function]}"):
        value = getattr(link, function)(pred, truth, K)
    metric = getattr(link, ALIASES[function])(K)
    metric.update(pred, truth)
    assert value == float(metric.compute())


def test_the_generic_function_warns_naming_the_generic_class():
    pred, truth = _data()
    with pytest.warns(DeprecationWarning, match="global_link_pred_metric is deprecated.*DistributedLinkPredMetric"):
        value = link.global_link_pred_metric(pyg_metrics.LinkPredNDCG(K), pred, truth)
    metric = link.DistributedLinkPredMetric(pyg_metrics.LinkPredNDCG(K))
    metric.update(pred, truth)
    assert value == float(metric.compute())
