"""What :func:`~pyg_sparsecomm.distribute` does with each layer class: the registry of
:class:`~.registry.LayerRule` objects (:mod:`.registry`, a leaf) and PyG's own rules (:mod:`.pyg`)."""
