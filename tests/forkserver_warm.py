"""What the fork server of ``launch`` prepares once for every rank it forks (the conftest preloads
this module): the built-in SBM graph, which the README's commands and the examples load in every
rank, generated once (``datasets`` keeps it per process; 0.9 s of CPU per rank otherwise)."""
from pyg_sparsecomm.datasets import load_dataset

load_dataset("SBM")
