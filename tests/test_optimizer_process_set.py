"""DistributedOptimizer on a process set that does not contain rank 0, with groups= (the group order is
broadcast from the set's first rank: root ranks are global ranks)."""
from mp import run_ranks


def body():
    import torch

    import pyhorovod.torch as hvd
    ps = hvd.ProcessSet([1, 2])
    hvd.init(process_sets=[ps])
    rank = hvd.rank()
    if rank == 0:
        hvd.barrier()  # stays in the job until the set's ranks are done
        return None
    model = torch.nn.Linear(3, 2, bias=True)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.fill_(0.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), groups=2, process_set=ps)
    x = torch.full((1, 3), float(rank))
    model(x).sum().backward()
    opt.step()
    hvd.barrier()
    return {"weight": model.weight.tolist(), "bias": model.bias.tolist()}


def test_optimizer_on_a_set_without_rank_0_with_groups():
    results = run_ranks(body, 3, timeout=120, collective_timeout=40)
    # d(sum)/dW = x for each output row: the mean over ranks 1 and 2 is 1.5; d/db = 1.
    for r in (1, 2):
        assert results[r].value == {"weight": [[-0.5] * 3] * 2, "bias": [-1.0, -1.0]}, results[r].value
