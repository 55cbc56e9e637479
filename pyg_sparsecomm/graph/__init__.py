"""The global graph, before it is partitioned: the input forms the package accepts and their checks
(:mod:`.inputs`, :mod:`.validate`), graph files (:mod:`.io`), generated graphs that need no download
(:mod:`.datasets`) and the offline switch for PyG datasets (:mod:`.offline`). It imports nothing else
of the package: the bottom of the flow."""
