"""Early-stop agreement across ranks: two CPU processes on the gloo backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from voxledger.tasks.backends.cosyvoice3.distributed import agree_stop

# Each rank runs an epoch loop with one collective per epoch (as gradient all-reduce would be);
# rank 0 wants to stop from epoch 2 on, rank 1 never does. Both must leave at epoch 2.
WORKER = """
import datetime
import sys
import torch
import torch.distributed as dist
from voxledger.tasks.backends.cosyvoice3.distributed import agree_stop

rank, store = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=20))
for epoch in range(10):
    work = torch.ones(1)
    dist.all_reduce(work)
    if agree_stop(rank == 0 and epoch >= 2):
        break
print(f"rank {rank} stopped at epoch {epoch}", flush=True)
dist.destroy_process_group()
"""


def test_identity_without_a_process_group() -> None:
    assert agree_stop(True) is True and agree_stop(False) is False


def test_ranks_stop_at_the_same_epoch(tmp_path: Path) -> None:
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(rank), str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]  # fmt: skip
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err  # a rank left alone times out in its next collective (20 s)
            outputs.append(out.strip())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert outputs == ["rank 0 stopped at epoch 2", "rank 1 stopped at epoch 2"]
