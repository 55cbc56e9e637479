r"""A single-process stand-in for ``staleness=1``: feeds each layer the previous step's halos.

The graph's edges that cross parts are re-pointed to *pair rows* (one per (reading rank,
source node), the rows the distributed exchange moves), appended after the ``N`` node rows.
At step :math:`t` a layer's source rows :math:`z_t` are extended with the pair rows

.. math::
    S_0 = z_0[\mathrm{pairs}] \ \text{(differentiable: step 0 is exact)}, \qquad
    S_t = u_t = \gamma u_{t-1} + (1 - \gamma)\, z_{t-1}[\mathrm{pairs}] \ \text{(constant)},

and the loss gets the term :math:`\sum z_t \odot R(v_t)` with :math:`v_t = \gamma v_{t-1} +
(1 - \gamma) g_{t-1}`, :math:`g_t = \partial L_t / \partial S_t`, :math:`R` the sum of pair rows
into their nodes: the previous step's halo gradients, delivered to the owners' rows.
"""
import torch
from torch import Tensor

from pyg_sparsecomm.plan import comm_pattern


class StaleHalos:
    def __init__(self, edge_index: Tensor, part: Tensor, num_nodes: int, num_parts: int,
                 gamma: float | None = None) -> None:
        pattern = comm_pattern(edge_index, part, num_nodes, num_parts)
        self.num_nodes, self.gamma = num_nodes, float(gamma or 0.0)
        self.pair_node = torch.from_numpy(pattern.pair_node)
        N, P = num_nodes, num_parts
        pair_key = (torch.from_numpy(pattern.pair_dst) * P + part[self.pair_node]) * N + self.pair_node
        self.part, self.pair_key, self.P = part, pair_key, P
        self.step = 0
        self.rows: dict[int, Tensor] = {}       # u_t per layer (t >= 1), z_0[pairs] at step 0
        self.sent: dict[int, Tensor] = {}       # z_t[pairs] of the current step
        self.grads: dict[int, Tensor] = {}      # v_t per layer
        self.pairs: dict[int, Tensor] = {}      # S_t of the current step
        self.sources: dict[int, Tensor] = {}    # z_t of the current step

    def extend_edges(self, edge_index: Tensor) -> Tensor:
        """``edge_index`` with every edge that crosses parts reading its source's pair row."""
        src, dst = edge_index
        out = edge_index.clone()
        cross = self.part[src] != self.part[dst]
        key = (self.part[dst[cross]] * self.P + self.part[src[cross]]) * self.num_nodes + src[cross]
        out[0, cross] = self.num_nodes + torch.searchsorted(self.pair_key, key)
        return out

    def extend(self, layer: int, z: Tensor) -> Tensor:
        """``[z ; S_t]``: the layer's source rows followed by this step's pair rows."""
        self.sources[layer], self.sent[layer] = z, z.detach()[self.pair_node]
        if self.step == 0:
            pairs = z[self.pair_node]
            if pairs.requires_grad:
                pairs.retain_grad()
        else:
            pairs = self.rows[layer].clone().requires_grad_(z.requires_grad)
        self.pairs[layer] = pairs
        return torch.cat([z, pairs], dim=0)

    def injection(self) -> Tensor:
        """The loss term delivering the previous step's halo gradients (0 at step 0)."""
        total = torch.zeros(())
        for layer, z in self.sources.items():
            if self.step > 0 and layer in self.grads and z.requires_grad:
                back = torch.zeros_like(z).index_add_(0, self.pair_node, self.grads[layer])
                total = total + (z * back).sum()
        return total

    def end_step(self) -> None:
        """After backward: the next step's rows and gradients."""
        g = self.gamma
        for layer, pairs in self.pairs.items():
            new_grad = pairs.grad if pairs.grad is not None else torch.zeros_like(pairs)
            if self.step == 0:
                self.rows[layer], self.grads[layer] = self.sent[layer], new_grad
            else:
                self.rows[layer] = g * self.rows[layer] + (1 - g) * self.sent[layer]
                self.grads[layer] = g * self.grads[layer] + (1 - g) * new_grad
        self.step += 1
        self.pairs, self.sources = {}, {}
