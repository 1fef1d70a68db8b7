"""Flow ``export_package``: write a package out as a folder another ecosystem loads (``package export``)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.adapter_export import AdapterExportReceipt, ExportFormat
from voxledger.stores.home import HomeRef
from voxledger.tasks.packaging.peft_export import export_peft_fn, store_package
from voxledger.tasks.stage import StageOutcome


@task(name="export_adapter", **STAGE_TASK)
def export_adapter(home: HomeRef, package: str, dest: str, fmt: ExportFormat) -> StageOutcome[AdapterExportReceipt]:
    """Export one package (a stored digest, or a package file, stored first) to ``dest``; one receipt."""
    h = open_home(home)
    path = Path(package)
    sha = store_package(h, path) if path.is_file() else package
    report(f"exporting package {sha[:12]} as {fmt}")
    return export_peft_fn(h, sha, Path(dest), flow=flow_name("export_package"))


@flow(name="export_package")
def export_package(home: HomeRef | str, package: str, dest: str, fmt: ExportFormat = "peft") -> StageOutcome[AdapterExportReceipt]:
    """``voxledger package export``."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return export_adapter(ref, package, dest, fmt)
