"""``voxledger equivalence attribute -``: the flow takes no base (a backend whose base is its own model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxledger.schemas.errors import PlanError, VoxledgerError

pytestmark = pytest.mark.prefect

PLAN = Path(__file__).resolve().parents[2] / "plans" / "equivalence-default.yaml"


def test_attribute_without_a_base_reaches_the_stage_not_a_parameter_error(tmp_path: Path, prefect_api: str) -> None:
    from voxledger.flows.equivalence import equivalence
    from voxledger.stores.home import HomeRef

    home = HomeRef(root=str(tmp_path / "h"))
    missing = "0" * 64  # an adapter tree the home does not hold: the stage itself must say so
    with pytest.raises(VoxledgerError) as caught:
        equivalence(home, "attribute", None, missing, str(PLAN), {"name": "adapter"}, {"name": "merged"}, "A test.", None, 0)
    assert "ParameterTypeError" not in type(caught.value).__name__ and "invalid parameters" not in str(caught.value)
    assert missing[:12] in str(caught.value), str(caught.value)


def test_compare_without_a_reference_is_refused_in_one_line(tmp_path: Path, prefect_api: str) -> None:
    from voxledger.flows.equivalence import equivalence
    from voxledger.stores.home import HomeRef

    with pytest.raises(PlanError, match="needs a reference dump folder or tree"):
        equivalence(HomeRef(root=str(tmp_path / "h")), "compare", None, str(tmp_path), str(PLAN), {"name": "a"}, {"name": "b"})
