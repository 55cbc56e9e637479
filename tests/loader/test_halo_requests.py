"""The request message's layout (``loader/halo_requests.py``): every flag a rank packs for an owner
lands, after the all-to-all, on the owner's send-list entry it stands for -- for several sources
(a heterogeneous shard's source types) and per-peer counts that are not multiples of 8 -- simulated
in one process by cutting every rank's packed bytes by the layouts' sizes, as the all-to-all does."""
import torch

from pyg_sparsecomm.loader.halo_requests import FlagLayout


def test_flags_reach_the_send_list_entries_they_stand_for():
    P, sources = 3, 2
    gen = torch.Generator().manual_seed(0)
    # asked[s][q][p]: entries of source s rank q holds in its halo from owner p (= p's send list to q)
    asked = torch.randint(0, 13, (sources, P, P), generator=gen)
    asked[:, torch.arange(P), torch.arange(P)] = 0  # no halo from oneself
    asked[1, 2, 0] = 0  # a peer with nothing of one source
    cpu = torch.device("cpu")
    asking = [FlagLayout([asked[s, q].tolist() for s in range(sources)], cpu) for q in range(P)]
    answering = [FlagLayout([asked[s, :, p].tolist() for s in range(sources)], cpu) for p in range(P)]
    flags = [[torch.rand(int(asked[s, q].sum()), generator=gen) < 0.4 for s in range(sources)] for q in range(P)]
    packed = [torch.split(asking[q].pack(flags[q]), asking[q].nbytes) for q in range(P)]
    for p in range(P):
        assert answering[p].nbytes == [asking[q].nbytes[p] for q in range(P)]  # both ends know the sizes
        received = answering[p].unpack(torch.cat([packed[q][p] for q in range(P)]))
        for s in range(sources):
            by_peer = torch.split(received[s], asked[s, :, p].tolist())
            for q in range(P):
                sent = torch.split(flags[q][s], asked[s, q].tolist())[p]
                assert torch.equal(by_peer[q], sent), (p, s, q)
    assert sum(int(f.sum()) for fs in flags for f in fs) > 0
