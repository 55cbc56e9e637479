"""The global graph, before it is partitioned: the input forms the package accepts and their checks
(:mod:`.inputs`, :mod:`.validate`), graph files (:mod:`.io`), generated graphs that need no download
(:mod:`.datasets`), the offline switch for PyG datasets (:mod:`.offline`) and index lists of its
nodes, which attributes are and their rows on a shard (:mod:`.node_index`). It imports nothing else
of the package: the bottom of the flow."""
