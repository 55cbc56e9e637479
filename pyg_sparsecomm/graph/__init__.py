"""The global graph, before it is partitioned: the input forms the package accepts and their checks
(:mod:`.inputs`, :mod:`.validate`), graph files (:mod:`.io`), graphs that need no download and PyG datasets
loaded offline (:mod:`.datasets`, :mod:`.offline`)."""
