r"""Where given keys sit in an ascending tensor of keys: the one lookup behind every "which rows of
this rank hold these global ids" of the package (a shard's ``n_id``, a batch's rows, a saved rank's
ids, an item table's targets), by binary search: :math:`O(q \log n)`, no array over all keys.
"""
import torch
from torch import Tensor


def lookup_sorted(sorted_keys: Tensor, queries: Tensor) -> tuple[Tensor, Tensor]:
    r"""``(at, found)``: for every query, the position ``at`` of an equal key in ``sorted_keys``
    where ``found`` (``sorted_keys[at] == queries``), and an in-range position where not (every
    position ``0`` when there are no keys), so that ``order[at[found]]`` reads the matches.

    Args:
        sorted_keys (torch.Tensor): ascending keys (distinct, or the first of equal ones is found).
        queries (torch.Tensor): the keys looked up, on the same device.

    Shapes:
        - **input:** ``sorted_keys`` :math:`(n)`, ``queries`` :math:`(q)`
        - **output:** ``at`` and ``found`` :math:`(q)`
    """
    if sorted_keys.numel() == 0:
        return (torch.zeros(queries.shape, dtype=torch.long, device=queries.device),
                torch.zeros(queries.shape, dtype=torch.bool, device=queries.device))
    at = torch.searchsorted(sorted_keys, queries).clamp_(max=sorted_keys.numel() - 1)
    return at, sorted_keys.index_select(0, at) == queries
