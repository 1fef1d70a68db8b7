"""What a reproduction took on a stat cache's word is counted and recorded, and ``--deep`` takes nothing on it.

The stat-cache hazard is made as in ``tests/stores/test_scrub.py``: an input object flipped under
its stat, the entry left vouching for its old bytes. The whole ``reproduce`` flow on a pipeline
home is exercised in ``tests/flows/test_reproduce.py``; here its input check runs on a small home.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.stores.test_scrub import _rot
from tests.stores.test_verify import _record
from voxledger.schemas.errors import ReproductionError
from voxledger.schemas.reproduction import ReproductionParameters
from voxledger.stores.hashing import stat_cache_use
from voxledger.stores.home import Home
from voxledger.stores.scratch import verify_inputs


def test_an_input_rotted_under_its_stat_is_trusted_and_counted_and_deep_refuses_it(home: Home, tmp_path: Path) -> None:
    rid, _tree, plain = _record(home, tmp_path, "run")
    _rot(home, home.blobs.path_of(plain))
    receipt = Home(home.root).receipts.read(rid)
    with stat_cache_use() as use:
        assert verify_inputs(Home(home.root), receipt, rid) == 1  # passes: the cache vouches for the old bytes
    assert use.vouched == 1
    with stat_cache_use(trust=False) as deep, pytest.raises(ReproductionError, match=f"input 'plain' {plain}"):
        verify_inputs(Home(home.root), receipt, rid)
    assert deep.vouched == 0


def test_trust_fields_are_recorded_and_older_receipts_still_validate() -> None:
    older: dict[str, Any] = {
        "original": "a" * 64, "original_kind": "audit", "rerun": None, "stage": "audit", "code_drift_allowed": False,
        "environment_differences": [], "torch_threads": None, "bands": {}, "objects_seeded": 3, "objects_unavailable": 0,
    }  # fmt: skip
    old = ReproductionParameters.model_validate(older)
    assert (old.stat_cache_trusted, old.deep) == (None, False)
    assert "stat_cache_trusted" not in old.model_dump(mode="json") and "deep" not in old.model_dump(mode="json")
    new = ReproductionParameters.model_validate(older | {"stat_cache_trusted": 0, "deep": True})
    dumped = json.loads(new.model_dump_json())
    assert (dumped["stat_cache_trusted"], dumped["deep"]) == (0, True)  # 0 is recorded, not dropped as a default
    assert ReproductionParameters.model_validate(older | {"stat_cache_trusted": 12}).model_dump()["stat_cache_trusted"] == 12
