"""Flow ``base``: bring a backend's shipped base into the home (verified, with a ``base_import`` receipt)."""

from __future__ import annotations

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.flows.progress import report
from voxledger.schemas.shipped import BaseImportReceipt
from voxledger.schemas.training import BackendName
from voxledger.stores.home import HomeRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.base_import import import_shipped_base


@task(name="import_base", **STAGE_TASK)
def import_base(home: HomeRef, backend: BackendName) -> StageOutcome[BaseImportReceipt]:
    """Verify the shipped base of ``backend`` byte for byte and store its tree; the receipt's subject ``base`` is the tree."""
    report(f"importing the shipped {backend} base")
    return import_shipped_base(open_home(home), backend, flow=flow_name())


base = stage_flow("base", import_base, module=__name__, doc="``voxledger base import``: the shipped base of ``backend`` in this home.")
