"""Checking a port (``python -m pyg_sparsecomm check-port``): :mod:`.record` runs a user's script
unmodified with recording hooks (losses passed to ``backward()``, parameters after every
``optimizer.step()``), :mod:`.switch_off` turns dropout into the identity, :mod:`.stand_ins` gives
PyG's ``NeighborLoader`` the package's batches, :mod:`.compare` reads two recordings and names the
first difference."""
