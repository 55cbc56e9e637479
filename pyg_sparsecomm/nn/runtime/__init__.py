"""The layer-call runtime of :func:`~pyg_sparsecomm.distribute`: what a layer does on a shard.

:func:`.layer.attach` compiles a layer's rule into a :class:`.plan.LayerPlan` and installs the hooks
(:mod:`.call` lists them and why); each call on a shard is one :class:`.call.LayerCall`; all halo
traffic goes through the layer's :class:`.port.HaloPort`.
"""
