"""What the fork server of ``launch`` prepares once for every rank it forks (the conftest preloads
this module):

- the built-in SBM graph, which the README's commands and the examples load in every rank,
  generated once (``datasets`` keeps it per process; 0.9 s of CPU per rank otherwise);
- ``torch.compile``'s Inductor and aot_eager stacks, imported, and Inductor's cached hash of the
  Triton install computed: ``test_compile``'s ranks otherwise spent about 4.5 s of CPU each on
  these before compiling anything. Neither starts a thread nor touches CUDA, so forking stays safe.
  These are torch's private modules: where a torch release moved them, the ranks import what they
  need themselves, as without this warm-up (nothing a test checks depends on it)."""
from pyg_sparsecomm.launch.datasets import load_dataset

load_dataset("SBM")
try:
    import torch._dynamo.backends.debugging  # noqa: F401  (aot_eager)
    import torch._dynamo.backends.inductor  # noqa: F401
    import torch._dynamo.repro.after_dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch.export._trace  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    from torch._inductor.codecache import triton_key
except ImportError:
    pass
else:
    triton_key()
