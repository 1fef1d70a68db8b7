"""Rank agreement lives with the generic training loop; re-exported for torchrun users of this backend."""

from voxledger.tasks.training.distributed import agree_stop

__all__ = ["agree_stop"]
