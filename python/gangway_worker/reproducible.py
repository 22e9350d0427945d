"""Bit-exact resumption under DDP at any world size.

DDP all-reduces gradients bucket by bucket, and a ring all-reduce adds each element's
contributions in an order that depends on where the element falls in its bucket. DDP lays its
buckets out once when it is built and again after the first iteration (in the order gradients
became ready). A resumed run's first step therefore reduces with another layout than the
uninterrupted run used at that step, and with more than two ranks (where addition's order
matters) its parameters differ in the last bits from then on.

``allreduce_in_rank_order`` is a DDP communication hook that makes the layout irrelevant: it
gathers every rank's bucket and adds them in rank order, element by element. It moves
world_size times the data of a ring all-reduce, which is cheap for small models and tests of
preemption, and not meant for large ones.
"""


def allreduce_in_rank_order(process_group, bucket):
    """DDP comm hook: the mean of the ranks' gradients, summed in rank order.

    Register it with ``model.register_comm_hook(None, gw.allreduce_in_rank_order)`` (``None``:
    the default process group) before the first backward pass.
    """
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    mine = bucket.buffer()
    parts = [torch.empty_like(mine) for _ in range(world)]
    gathered = dist.all_gather(parts, mine, group=group, async_op=True).get_future()

    def mean(_):
        total = parts[0].clone()
        for part in parts[1:]:
            total.add_(part)
        return total.div_(world)

    return gathered.then(mean)
