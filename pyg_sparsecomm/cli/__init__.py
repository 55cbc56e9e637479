"""``python -m pyg_sparsecomm COMMAND``: the command line (:mod:`.main`), one module per command
(:mod:`.partition`, :mod:`.partition_stats`), their shared options (:mod:`.options`) and figures
(:mod:`.plots`). Parsing imports neither torch nor PyG."""
