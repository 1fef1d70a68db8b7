"""Flow ``export_mlflow``: project a home's catalog into an MLflow tracking store (``export mlflow``)."""

from __future__ import annotations

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.mlflow_export import MlflowExportReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.mlflow_export import export_mlflow_fn, public_uri
from voxledger.tasks.stage import StageOutcome


@task(name="export_to_mlflow", **STAGE_TASK)
def export_to_mlflow(home: HomeRef, uri: str, experiment: str, artifact_root: str | None) -> StageOutcome[MlflowExportReceipt]:
    """Write what the store does not hold yet (runs, versions, aliases); one receipt naming what was read and written."""
    report(f"exporting to MLflow at {public_uri(uri)}")
    return export_mlflow_fn(open_home(home), uri, experiment, artifact_root=artifact_root, flow=flow_name("export_mlflow"))


@flow(name="export_mlflow")
def export_mlflow(
    home: HomeRef | str, uri: str, experiment: str = "voxledger", artifact_root: str | None = None
) -> StageOutcome[MlflowExportReceipt]:
    """``voxledger export mlflow``."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return export_to_mlflow(ref, uri, experiment, artifact_root)
