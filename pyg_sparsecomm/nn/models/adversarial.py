r"""PyG's adversarially regularised auto-encoders on a shard: ``ARGA`` and ``ARGVA``.

They are ``GAE`` (and, for ``ARGVA``, a ``VGAE`` child doing its encoding and KL term) with a
discriminator of latent rows; :mod:`.autoencoder` says what their shared methods do on a shard.
Their own terms are means over all nodes of all ranks, with
:func:`~pyg_sparsecomm.distributed_loss`'s conventions:

.. math::
    L_{reg} = -\frac{1}{N}\sum_v \log \sigma(\mathcal{D}(z_v)), \qquad
    L_{\mathcal{D}} = -\frac{1}{N}\sum_v \log \sigma(\mathcal{D}(\varepsilon_v))
    - \frac{1}{N}\sum_v \log(1 - \sigma(\mathcal{D}(z_v)))

with the prior's samples :math:`\varepsilon_v` drawn per global node id (:mod:`.node_noise`; PyG
draws ``torch.randn_like(z)``), the same for any number of ranks.
"""
import torch
from torch import Tensor
from torch_geometric.nn.models import ARGA, ARGVA
from torch_geometric.nn.models.autoencoder import EPS

from .autoencoder import PRIOR, ShardAutoEncoder


class AdversarialShard(ShardAutoEncoder):
    """The discriminator's terms of ``ARGA`` and ``ARGVA`` on a shard (see the module doc)."""

    def reg_loss(self, z: Tensor) -> Tensor:
        r""":math:`L_{reg}`, the encoder's regularisation over all nodes.

        Args:
            z (torch.Tensor): this rank's rows of the latent space.
        """
        real = torch.sigmoid(self.discriminator(z))  # type: ignore[attr-defined]
        return self._means(-torch.log(real + EPS))

    def discriminator_loss(self, z: Tensor) -> Tensor:
        r""":math:`L_{\mathcal{D}}`, the discriminator's loss over all nodes.

        Args:
            z (torch.Tensor): this rank's rows of the latent space.
        """
        prior = self._node_noise(z, PRIOR, f"{type(self).__name__}.discriminator_loss")
        real = torch.sigmoid(self.discriminator(prior))  # type: ignore[attr-defined]
        fake = torch.sigmoid(self.discriminator(z.detach()))  # type: ignore[attr-defined]
        return self._means(-torch.log(real + EPS), -torch.log(1 - fake + EPS))


class DistributedARGA(AdversarialShard, ARGA):
    """PyG's ``ARGA`` on a shard (see the module doc); ``distribute`` swaps it in."""


class DistributedARGVA(AdversarialShard, ARGVA):
    """PyG's ``ARGVA`` on a shard (see the module doc); ``distribute`` swaps it in (and its ``VGAE``
    child for :class:`~.autoencoder.DistributedVGAE`, which encodes and draws its noise)."""
