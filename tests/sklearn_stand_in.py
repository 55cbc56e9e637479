"""Stand-ins for the scikit-learn functions PyG's ``DeepGraphInfomax.test`` and ``GAE.test`` import, where
scikit-learn is not installed (it is no dependency of the package): the same definitions, written plainly, so
that the single-process PyG reference and the distributed run call the same thing.  With scikit-learn
installed, its own are used."""
import contextlib
import sys
import types

import numpy as np
import torch


class NearestCentroid:
    """Stands in for ``LogisticRegression``: deterministic, fitted on every row it is given (the class of the
    nearest class mean)."""

    def __init__(self, *args, solver="lbfgs", **kwargs):
        self.kwargs = kwargs

    def fit(self, x, y):
        self.classes = np.unique(y)
        self.means = np.stack([x[y == c].mean(0) for c in self.classes])
        return self

    def predict(self, x):
        return self.classes[((x[:, None, :] - self.means[None]) ** 2).sum(-1).argmin(1)]

    def score(self, x, y):
        return float((self.predict(x) == y).mean())


def pairwise_auc(y_true, y_score) -> float:
    """``roc_auc_score`` by its definition (all positive-negative pairs, ties one half)."""
    y, s = torch.as_tensor(y_true).bool(), torch.as_tensor(y_score).double()
    difference = s[y][:, None] - s[~y][None, :]
    return float(((difference > 0).double() + 0.5 * (difference == 0).double()).mean())


def precision_at_thresholds(y_true, y_score) -> float:
    """``average_precision_score`` by its definition: the precision at every distinct score, weighted by the
    recall it adds (tied scores one step)."""
    y, s = torch.as_tensor(y_true).bool(), torch.as_tensor(y_score).double()
    total, recall = 0.0, 0.0
    for threshold in s.unique().flip(0):
        chosen = s >= threshold
        hits = int((chosen & y).sum())
        total += (hits / int(y.sum()) - recall) * hits / int(chosen.sum())
        recall = hits / int(y.sum())
    return total


def install() -> None:
    """Puts the stand-ins into ``sys.modules`` where scikit-learn is missing (in a launched rank)."""
    try:
        import sklearn.linear_model  # noqa: F401
        import sklearn.metrics  # noqa: F401
    except ImportError:
        sys.modules.update(_modules())


@contextlib.contextmanager
def installed():
    """:func:`install` for a block of the test process, removed after it."""
    try:
        import sklearn.linear_model  # noqa: F401
        import sklearn.metrics  # noqa: F401
        yield
        return
    except ImportError:
        pass
    saved = {name: sys.modules.get(name) for name in _modules()}
    sys.modules.update(_modules())
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _modules() -> dict[str, types.ModuleType]:
    linear_model, metrics = types.ModuleType("sklearn.linear_model"), types.ModuleType("sklearn.metrics")
    linear_model.LogisticRegression = NearestCentroid
    metrics.roc_auc_score, metrics.average_precision_score = pairwise_auc, precision_at_thresholds
    return {"sklearn": types.ModuleType("sklearn"), "sklearn.linear_model": linear_model, "sklearn.metrics": metrics}
