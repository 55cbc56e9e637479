"""The graphs the examples, benchmarks and CLI load by name, read rank 0 first.

``"SBM"`` is generated (:func:`~pyg_sparsecomm.graph.datasets.sbm_graph`); the Planetoid sets are read
from their raw files, rank 0 first under a process group so that ranks never write the same processed
file at once (a start-up concern, hence here, beside :func:`~pyg_sparsecomm.launch.startup.rank_zero_first`).
"""
from pathlib import Path

from torch_geometric.data import Data

from ..comm.group import is_distributed, raise_together, rank
from ..graph.datasets import sbm_graph
from ..graph.offline import OFFLINE_ENV, is_offline

#: the Planetoid sets :func:`load_dataset` reads
PLANETOID = ("Cora", "CiteSeer", "PubMed")
_PLANETOID_FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/tree/master/data"


def load_dataset(name: str, root: str = "data", seed: int = 0, barrier: bool = True,
                 download: bool | None = None) -> Data:
    """``"SBM"`` (:func:`sbm_graph`, generated) or a Planetoid set (``"Cora"``, ``"CiteSeer"``,
    ``"PubMed"``) with normalised features, read from ``root/<name>/raw``.

    Under a process group (and ``barrier=True``; pass ``False`` when only one rank calls it)
    rank 0 reads the raw files (and downloads them when they are missing and ``download``
    allows) while the others wait, so that ranks never write the same processed file at once.
    Any rank's failure is raised on every rank with its message, never as a peer's
    "Connection closed".

    Args:
        name (str): ``"SBM"``, ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"``.
        root (str, optional): the Planetoid root; the raw files are ``root/<name>/raw/ind.<name>.*``.
            (default: :obj:`"data"`)
        seed (int, optional): the SBM graph's seed. (default: :obj:`0`)
        barrier (bool, optional): rank 0 first under a process group (every rank must call it then).
            (default: :obj:`True`)
        download (bool, optional): fetch missing raw files with PyG's ``Planetoid``.  ``None``:
            yes, unless the environment sets ``PYG_SPARSECOMM_OFFLINE`` (:data:`OFFLINE_ENV`).
            (default: :obj:`None`)

    Raises:
        ValueError: an unknown ``name``.
        FileNotFoundError: raw files missing and not downloaded (download off or failed); the
            message names the directory, the missing files and where to get them.
    """
    if name == "SBM":
        return sbm_graph(seed=seed)
    if name not in PLANETOID:
        raise ValueError(f"unknown dataset {name!r}: use 'SBM' (generated, no files) or one of {list(PLANETOID)}")
    if download is None:
        download = not is_offline()
    if not (barrier and is_distributed()):
        return _planetoid(name, root, download)
    what = f"load_dataset({name!r}, root={root!r})"
    first = raise_together(lambda: _planetoid(name, root, download) if rank() == 0 else None, what)
    # the other ranks read what rank 0 processed: they never download (ranks of one machine would race)
    return raise_together(lambda: first if rank() == 0 else _planetoid(name, root, download=False), what)


def _planetoid(name: str, root: str, download: bool) -> Data:
    """Planetoid ``name`` under ``root`` (one process), with a clear error where files are missing."""
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid
    raw_dir = Path(root) / name / "raw"
    files = [f"ind.{name.lower()}.{suffix}" for suffix in _PLANETOID_FILES]
    missing = [f for f in files if not (raw_dir / f).is_file()]
    if missing and not download:
        why = f"{OFFLINE_ENV} is set" if is_offline() else "download=False"
        raise FileNotFoundError(_missing_files(name, raw_dir, missing, f"not downloaded: {why}"))
    try:
        return Planetoid(root, name, transform=T.NormalizeFeatures())[0]
    except Exception as e:  # noqa: BLE001 - a failed download becomes the missing-files error
        if not missing or all((raw_dir / f).is_file() for f in files):
            raise
        reason = f"downloading them failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        raise FileNotFoundError(_missing_files(name, raw_dir, missing, reason)) from None


def _missing_files(name: str, raw_dir: Path, missing: list[str], reason: str) -> str:
    which = f"no Planetoid raw files in {raw_dir}/" if len(missing) == len(_PLANETOID_FILES) \
        else f"Planetoid raw files missing in {raw_dir}/: {', '.join(missing)}"
    return (f"{name}: {which}; {reason}. To run offline, copy the {len(_PLANETOID_FILES)} raw files "
            f"ind.{name.lower()}.{{{','.join(_PLANETOID_FILES)}}} (from {_PLANETOID_URL}) into {raw_dir}/, "
            f"or pass a root that holds {name}/raw/ (root= here, --root in the examples)")


#: the relations of :func:`igbh_like`, ``(source, relation, destination)``, before their reverses
