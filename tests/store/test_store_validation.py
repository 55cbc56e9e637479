"""The partition cache refuses what it was not made for: stale sources, corrupt manifests,
edge attributes that would put the whole graph on every rank."""
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from graphs import make_cases

from pyg_sparsecomm import SparsityAwarePartitioner, graph_fingerprint, load_shard, save_partition, shard
from pyg_sparsecomm.store.files import partition_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _graph():
    return make_cases(1)["weighted"]


def _saved(tmp_path, method="metis", seed=0, P=3, dataset="toy"):
    partitioner = SparsityAwarePartitioner(P, method, seed=seed)
    data = partitioner(_graph())
    save_partition(data, tmp_path, source=partition_source(partitioner, dataset=dataset))
    return data


def test_manifest_records_how_the_partition_was_made(tmp_path):
    data = _saved(tmp_path, "metis+vb", seed=5)
    source = json.loads((tmp_path / "manifest.json").read_text())["source"]
    assert source["method"] == "metis+vb" and source["seed"] == 5 and source["num_parts"] == 3
    assert source["dataset"] == "toy" and source["options"]["vb_restarts"] == 4
    assert source["options"]["vb_objective"] == "auto"
    assert (source["num_nodes"], source["num_edges"]) == (data.num_nodes, data.edge_index.size(1))
    assert (source["num_features"], source["x_dtype"]) == (data.x.size(1), "float32")
    assert source["fingerprint"] == graph_fingerprint(data)


def test_matching_cache_loads_and_stale_cache_names_the_fields(tmp_path):
    data = _saved(tmp_path, "metis", seed=0)
    same = partition_source(SparsityAwarePartitioner(3, "metis", seed=0), dataset="toy")
    for r in range(3):
        loaded = load_shard(tmp_path, rank=r, world_size=3, expected_source=same)
        assert torch.equal(loaded.n_id, shard(data, rank=r, world_size=3).n_id)
    other = partition_source(SparsityAwarePartitioner(3, "hypergraph", seed=1), dataset="toy")
    with pytest.raises(ValueError) as err:
        load_shard(tmp_path, rank=0, world_size=3, expected_source=other)
    msg = str(err.value)
    assert f"partition cache at {tmp_path} was made with method='metis', seed=0" in msg
    assert "this run asks for method='hypergraph', seed=1" in msg and "delete the directory" in msg
    assert "dataset" not in msg and "num_parts" not in msg  # only the fields that differ
    opts = partition_source(SparsityAwarePartitioner(3, "metis", seed=0, objective="vol"), dataset="toy")
    with pytest.raises(ValueError, match=r"options=\{\}; this run asks for options=\{'objective': 'vol'\}"):
        load_shard(tmp_path, rank=0, world_size=3, expected_source=opts)
    with pytest.raises(ValueError, match="dataset='toy'; this run asks for dataset='Cora'"):
        load_shard(tmp_path, rank=0, world_size=3, expected_source={**same, "dataset": "Cora"})


def test_fingerprint_covers_features_labels_and_masks(tmp_path):
    data = _saved(tmp_path)
    data.y = torch.zeros(data.num_nodes, dtype=torch.long)
    data.train_mask = torch.ones(data.num_nodes, dtype=torch.bool)
    base = graph_fingerprint(data)
    for key in ("x", "y", "train_mask"):
        changed = data.clone()
        changed[key] = changed[key].clone()
        changed[key][0] = 1 - changed[key][0] if key != "train_mask" else False
        assert graph_fingerprint(changed) != base, key
    changed = data.clone()
    changed.x = changed.x.clone()
    changed.x[3, 2] += 1.0
    with pytest.raises(ValueError, match="stale cache"):
        load_shard(tmp_path, rank=0, world_size=3, expected_fingerprint=graph_fingerprint(changed))


def test_source_that_does_not_describe_the_data_is_refused(tmp_path):
    data = SparsityAwarePartitioner(3, "metis")(_graph())
    with pytest.raises(ValueError, match="num_parts=4 given, but data has num_parts=3"):
        save_partition(data, tmp_path, source=partition_source(SparsityAwarePartitioner(4, "metis")))


def _without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


CORRUPT = {  # name: (how to break the good manifest, the problem the error names)
    "list_body": (lambda m: [1, 2], "expected a JSON object, got a JSON array"),
    "null_body": (lambda m: None, "expected a JSON object, got a JSON null"),
    "no_source": (lambda m: _without(m, "source"), r"the manifest lacks key\(s\) \['source'\]"),
    "no_files": (lambda m: _without(m, "files"), r"the manifest lacks key\(s\) \['files'\]"),
    "source_keys": (lambda m: {**m, "source": _without(m["source"], "num_edges", "fingerprint")},
                    r"source lacks key\(s\) \['fingerprint', 'num_edges'\]"),
    "files_list": (lambda m: {**m, "files": []}, "'files' in the manifest should be a JSON object, got a JSON array"),
    "parts_str": (lambda m: {**m, "source": {**m["source"], "num_parts": "3"}},
                  "'num_parts' in source should be a JSON integer, got a JSON string"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_manifest_gives_value_error_naming_file(tmp_path, case):
    _saved(tmp_path)
    path = tmp_path / "manifest.json"
    breaker, problem = CORRUPT[case]
    path.write_text(json.dumps(breaker(json.loads(path.read_text()))))
    with pytest.raises(ValueError, match=re.escape(f"corrupt partition manifest {path}: ") + problem):
        load_shard(tmp_path, rank=0, world_size=3)


def _with_edge_attributes():
    data = _graph()
    E = data.edge_index.size(1)
    data.edge_attr = torch.randn(E, 3, generator=torch.Generator().manual_seed(1))
    data.edge_type = torch.arange(E) % 5
    data.time = torch.arange(E, dtype=torch.float64)  # no 'edge' in the name
    data.num_classes = 7  # graph-level: copied
    return data


def _global_edges_of(local):
    """(src, dst) global ids of every local adjacency entry, in adj order."""
    plan = local.adj.plan
    ids = torch.cat([plan.n_id, plan.halo_n_id])
    return torch.stack([ids[local.adj.col], plan.n_id[local.adj.row()]])


def test_edge_attributes_are_sliced_to_the_local_edges(tmp_path):
    data = SparsityAwarePartitioner(3, "metis")(_with_edge_attributes())
    save_partition(data, tmp_path)
    E, seen = data.edge_index.size(1), []
    for r in range(3):
        record = torch.load(tmp_path / f"part-{r}.pt", weights_only=True)
        nnz = record["col"].numel()
        for key in ("edge_attr", "edge_type", "time"):
            assert record["attrs"][key].size(0) == nnz < E, key  # never the whole-graph tensor
        for local in (load_shard(tmp_path, rank=r, world_size=3), shard(data, rank=r, world_size=3)):
            # e_id follows adj order: the global edge it names is the entry's (src, dst)
            assert torch.equal(_global_edges_of(local), data.edge_index[:, local.e_id])
            for key in ("edge_attr", "edge_type", "time"):
                assert torch.equal(local[key], data[key][local.e_id]), key
            assert local.num_classes == 7
        seen.append(local.e_id)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(E))


def test_edge_attribute_without_edge_rows_is_refused():
    data = _graph()
    data.edge_pair_index = torch.zeros(2, data.edge_index.size(1), dtype=torch.long)  # [2, E]
    data = SparsityAwarePartitioner(2, "metis")(data)
    with pytest.raises(ValueError, match=r"edge-level attribute 'edge_pair_index' has shape \[2, \d+\]"):
        shard(data, rank=0, world_size=2)


def test_example_refuses_a_cache_made_another_way(tmp_path):
    sys.path.insert(0, str(EXAMPLES))
    import train_gcn

    def run(*extra):  # one process: the same cache logic as on P ranks, without spawning
        argv = ["--epochs", "1", "--dropout", "0", "--partition-dir", str(tmp_path / "parts"), *extra]
        return train_gcn.run(train_gcn.parse_args(argv), 0, 1, verbose=False)

    first = run("--method", "random")
    again = run("--method", "random")  # the same run: the cache is reused
    assert first["loss"] == again["loss"]
    with pytest.raises(ValueError, match="made with method='random'; this run asks for method='metis'"):
        run("--method", "metis")
    with pytest.raises(ValueError, match="made with seed=0; this run asks for seed=3"):
        run("--method", "random", "--seed", "3")
