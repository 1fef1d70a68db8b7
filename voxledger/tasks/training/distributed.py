"""Agreement between ranks under torchrun.

Every rank computes its own early-stopping verdict from its own numbers; if one rank left the
epoch loop while another entered the next epoch, the next collective would hang. `agree_stop`
makes the decision collective: any rank that wants to stop stops them all (MAX over ranks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def agree_stop(local_stop: bool) -> bool:
    """True on every rank when any rank passes True (all-reduce MAX); identity without a process group.

    Must be called by every rank at the same point (it is a collective). With the NCCL backend
    the flag travels on this rank's CUDA device.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return local_stop
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    flag = torch.tensor([1 if local_stop else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
