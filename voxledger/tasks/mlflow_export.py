"""``export mlflow``: a home's catalog projected into an MLflow tracking store, a derived view.

- **Runs**: one per stage receipt (the kinds of the stage table), in one experiment. Params are
  the receipt's ``parameters`` flattened to dotted keys; metrics are every number of its other
  fields (``result``, ``report``), a list of records keyed by their name (``candidate``, ``stage``,
  ...) or, for per-epoch records, logged as a metric history with ``step = epoch`` (a training
  run's ``epochs.cv_loss``, ``epochs.train_loss``, ...). Tags carry the receipt id, its kind and
  status, every output and input digest by role, the code identity; the receipt's own bytes are the
  run's ``receipt.json`` artifact, a package's tar its ``package/`` artifact.
- **Registered models**: one per model line (``spk_t/tiny`` is ``spk_t.tiny``: MLflow refuses
  ``/`` in a name), a version per succeeded package (its tar as the source), and each alias the
  line's history holds (``champion``, ``candidate``) set on the version of the newest package of the
  checkpoint the alias points at (removed when no package of it exists).
- **Idempotent and incremental**: a run is found by its ``voxledger.receipt`` tag, set last, after
  everything else was logged (an interrupted export leaves a run with only ``voxledger.exporting``,
  which the next export deletes and redoes); a version by its ``voxledger.package_sha256`` tag.
  A second export of an unchanged home writes nothing to the store.

mlflow is an optional extra imported here only (``pip install 'voxledger[mlflow]'``); MLflow's
usage telemetry is switched off before it loads (``MLFLOW_DISABLE_TELEMETRY``), so a local store
is reached without any network.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from voxledger.schemas.base import InputRef, ReceiptBase, utc_now
from voxledger.schemas.errors import BlobMissingError, ExportError
from voxledger.schemas.mlflow_export import (
    ExportedAlias,
    ExportedRun,
    ExportedVersion,
    MlflowExportParameters,
    MlflowExportReceipt,
    MlflowExportResult,
)
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.promotion import model_line
from voxledger.schemas.stages import STAGE_ROWS
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.queries import alias_moves, receipts_of_kinds, succeeded_packages
from voxledger.tasks.receipting import build_receipt
from voxledger.tasks.stage import StageOutcome, record

INSTALL_HINT = "pip install 'voxledger[mlflow]'"
RECEIPT_TAG = "voxledger.receipt"
PENDING_TAG = "voxledger.exporting"
PACKAGE_TAG = "voxledger.package_sha256"
LINE_TAG = "voxledger.line"
STORE_FILE = "mlflow.db"
MAX_PARAM_CHARS = 6000  # MLflow's limit on one param value
NAMING_KEYS = ("candidate", "baseline", "metric", "name", "stage", "code", "role")
"""Fields that name a record in a list (joined with '-'); a list whose names repeat is keyed by position."""
_BASE_FIELDS = frozenset(ReceiptBase.model_fields) | {"kind", "parameters"}


def load_mlflow() -> Any:
    """Import mlflow (telemetry off, its loggers quiet) or raise ExportError naming the extra to install."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # else a new store's table creation is logged at INFO
    try:
        import mlflow
    except ImportError as exc:
        raise ExportError(f"export mlflow needs MLflow, an optional extra that is not installed ({exc}): {INSTALL_HINT}") from exc
    return mlflow


def folder_store(folder: Path) -> str:
    """The tracking URI of the local store in ``folder``: a SQLite file (MLflow 3 refuses a plain-folder store)."""
    return f"sqlite:///{folder.absolute() / STORE_FILE}"


def public_uri(uri: str) -> str:
    """``uri`` without a user name or password (what a receipt may record)."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def model_name(line: str) -> str:
    """The registered model of a model line: ``VOICE.BACKEND`` (a backend name holds no '.', so it splits back)."""
    return line.replace("/", ".")


def _key(text: str) -> str:
    """An MLflow param/metric/tag key: characters outside ``[/\\w.\\- :]`` become '_', at most 250 characters."""
    return "".join(c if c.isalnum() or c in "_/.- :" else "_" for c in text)[:250]


def _item_names(items: list[Any]) -> list[str]:
    """Keys for a list's items: their naming fields when every item has distinct ones, else positions."""
    names = ["-".join(str(i[k]) for k in NAMING_KEYS if isinstance(i, dict) and isinstance(i.get(k), str)) for i in items]
    return names if all(names) and len(set(names)) == len(names) else [str(n) for n in range(len(items))]


@dataclass
class Flat:
    """A receipt's numbers: metric key -> [(step, value)] (step 0 for a single value)."""

    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, key: str, value: float, step: int = 0) -> None:
        self.metrics.setdefault(_key(key), []).append((step, value))

    def count(self) -> int:
        return sum(len(v) for v in self.metrics.values())


def flatten_numbers(value: Any, prefix: str, out: Flat, step: int | None = None) -> None:
    """Every number (booleans as 0/1) under ``value`` into ``out``; a list of records that each carry an
    integer ``epoch`` becomes one history per field, at ``step = epoch``."""
    if isinstance(value, int | float):  # booleans too, as 0/1
        out.add(prefix, float(value), step or 0)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not (step is not None and k == "epoch"):
                flatten_numbers(v, f"{prefix}.{k}" if prefix else str(k), out, step)
    elif isinstance(value, list | tuple):
        items = list(value)
        if items and all(isinstance(i, dict) and isinstance(i.get("epoch"), int) and not isinstance(i["epoch"], bool) for i in items):
            for item in items:
                flatten_numbers(item, prefix, out, item["epoch"])
            return
        for name, item in zip(_item_names(items), items, strict=True):
            flatten_numbers(item, f"{prefix}.{name}" if prefix else name, out, step)


def flatten_params(value: Any, prefix: str = "") -> dict[str, str]:
    """Dotted key -> text of every field under ``value``: objects are walked, a list is one JSON value."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flatten_params(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    text = json.dumps(value, sort_keys=True) if isinstance(value, list | tuple) else ("" if value is None else str(value))
    return {_key(prefix): text}


def receipt_numbers(receipt: ReceiptBase) -> Flat:
    """The metrics of a receipt: numbers of its own fields (``result``'s without a prefix)."""
    doc = receipt.model_dump(mode="json")
    out = Flat()
    for name, value in doc.items():
        if name not in _BASE_FIELDS:
            flatten_numbers(value, "" if name == "result" else name, out)
    return out


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Projection:
    """One export's view of the store: the experiment, its runs by receipt, the versions by package."""

    def __init__(self, mlflow: Any, uri: str, experiment: str, artifact_root: str | None) -> None:
        self.mlflow = mlflow
        self.client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = str(
            found.experiment_id if found else self.client.create_experiment(experiment, artifact_location=artifact_root)
        )
        self.runs: dict[str, str] = {}
        self.abandoned = 0
        for run in self._all_runs():
            tags = run.data.tags
            if RECEIPT_TAG in tags:
                self.runs[tags[RECEIPT_TAG]] = run.info.run_id
            elif PENDING_TAG in tags:  # an interrupted export's run: its receipt is exported again below
                self.client.delete_run(run.info.run_id)
                self.abandoned += 1

    def _all_runs(self) -> Iterator[Any]:
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], max_results=1000, page_token=token)
            yield from page
            token = page.token
            if not token:
                return

    def versions(self) -> dict[str, tuple[str, str]]:
        """package digest -> (registered model, version) of every version this store's registry holds for a package."""
        out: dict[str, tuple[str, str]] = {}
        token = None
        while True:
            page = self.client.search_model_versions(max_results=1000, page_token=token)
            for v in page:
                if PACKAGE_TAG in v.tags:
                    out[v.tags[PACKAGE_TAG]] = (v.name, str(v.version))
            token = page.token
            if not token:
                return out

    def log_run(self, home: Home, rid: str, receipt: ReceiptBase, package_file: Path | None) -> ExportedRun:
        """Create the run of one receipt; its receipt tag is set last, once everything else is logged."""
        from mlflow.entities import Metric, Param, RunTag

        kind = str(getattr(receipt, "kind", ""))
        run = self.client.create_run(
            self.experiment_id, start_time=_ms(receipt.started_at), tags={PENDING_TAG: rid}, run_name=f"{kind} {rid[:12]}"
        )
        run_id = run.info.run_id
        params = flatten_params(receipt.model_dump(mode="json").get("parameters") or {})
        too_long = tuple(sorted(k for k, v in params.items() if len(v) > MAX_PARAM_CHARS))
        numbers = receipt_numbers(receipt)
        stamp = _ms(receipt.finished_at)
        metrics = [Metric(k, v, stamp, s) for k, steps in numbers.metrics.items() for s, v in steps]
        for batch in _chunks([Param(k, v) for k, v in sorted(params.items()) if k not in too_long], 100):
            self.client.log_batch(run_id, params=batch)
        for batch in _chunks(metrics, 1000):
            self.client.log_batch(run_id, metrics=batch)
        for batch in _chunks([RunTag(k, v) for k, v in sorted(run_tags(receipt).items())], 100):
            self.client.log_batch(run_id, tags=batch)
        with tempfile.TemporaryDirectory() as tmp:
            named = Path(tmp) / "receipt.json"
            named.write_bytes(home.blobs.get_bytes(rid))
            self.client.log_artifact(run_id, str(named))
            if package_file is not None:
                tar = Path(tmp) / f"{receipt.result.package_sha256}.tar"  # type: ignore[attr-defined]
                tar.symlink_to(package_file)
                self.client.log_artifact(run_id, str(tar), artifact_path="package")
        self.client.set_terminated(run_id, status="FINISHED" if receipt.status == "succeeded" else "FAILED", end_time=stamp)
        self.client.set_tag(run_id, RECEIPT_TAG, rid)  # the commit point: from here on the run counts as exported
        self.runs[rid] = run_id
        return ExportedRun(
            receipt_sha256=rid, kind=kind, run_id=run_id, created=True, params=len(params) - len(too_long), metrics=len(metrics),
            params_too_long=too_long,
        )  # fmt: skip

    def register(self, name: str, line: str) -> dict[str, str]:
        """The registered model ``name`` (created when missing, tagged with its line); returns its aliases."""
        from mlflow.exceptions import MlflowException

        try:
            return dict(self.client.get_registered_model(name).aliases)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        self.client.create_registered_model(name, tags={LINE_TAG: line}, description=f"voxledger model line {line}")
        return {}


def run_tags(receipt: ReceiptBase) -> dict[str, str]:
    """What identifies a receipt's run: kind, status, flow, code, and every output and input digest by role."""
    code = receipt.environment.code
    tags = {
        "voxledger.kind": str(getattr(receipt, "kind", "")),
        "voxledger.status": receipt.status,
        "voxledger.flow": receipt.producer.flow,
        "voxledger.code_sha256": code.source_sha256,
    }
    if code.git_commit:
        tags["mlflow.source.git.commit"] = code.git_commit
    tags.update({_key(f"voxledger.output.{a.role}"): a.sha256 for a in receipt.subjects})
    tags.update({_key(f"voxledger.input.{i.role}"): i.sha256 for i in receipt.inputs})
    return tags


def stage_kinds() -> list[str]:
    """The receipt kinds a run is made for: every stage's receipt (the stage table)."""
    return sorted({row.receipt for row in STAGE_ROWS})


def _line_of_package(home: Home, receipt: PackageReceipt) -> str:
    """The model line of a package: its training run's voice (the plan's ``new_speaker``, as the promotion
    stage reads it) on its backend; components never import a stage, so the one lookup is repeated here."""
    run = home.receipts.read(receipt.parameters.training_run, TrainingRunReceipt)
    plan = run.parameters.effective_config.get("plan")
    voice = plan.get("new_speaker") if isinstance(plan, dict) else None
    return model_line(voice if isinstance(voice, str) else None, run.parameters.backend)


def export_mlflow_fn(
    home: Home, uri: str, experiment: str = "voxledger", *, artifact_root: str | None = None, flow: str = "export_mlflow"
) -> StageOutcome[MlflowExportReceipt]:
    """Project the home's stage receipts, packages and aliases into the MLflow store at ``uri``; record what it did.

    Raises ExportError (mlflow not installed, or the store refused a write; nothing is recorded then,
    and a re-run finishes what was left).
    """
    started = utc_now()
    mlflow = load_mlflow()
    if artifact_root is None and uri.startswith("sqlite:///"):  # beside the database, never MLflow's ./mlruns in the working folder
        artifact_root = (Path(uri.removeprefix("sqlite:///")).absolute().parent / "artifacts").as_uri()
    try:
        return _export(home, mlflow, uri, experiment, artifact_root, flow, started)
    except mlflow.exceptions.MlflowException as exc:
        raise ExportError(
            f"the MLflow store at {public_uri(uri)} refused the export: {exc.message}; fix the store and run the export again "
            "(what was written is kept, and found again)"
        ) from exc


def _export(home: Home, mlflow: Any, uri: str, experiment: str, artifact_root: str | None, flow: str, started: datetime) -> StageOutcome[MlflowExportReceipt]:  # fmt: skip
    view = Projection(mlflow, uri, experiment, artifact_root)
    packages = {rid: (sha, tree) for rid, sha, tree in succeeded_packages(home.catalog)}
    read = receipts_of_kinds(home.catalog, stage_kinds())
    runs: list[ExportedRun] = []
    for rid, kind in read:
        if rid in view.runs:
            runs.append(ExportedRun(receipt_sha256=rid, kind=kind, run_id=view.runs[rid], created=False, params=0, metrics=0))
            continue
        file = _package_file(home, packages[rid][0]) if rid in packages else None
        runs.append(view.log_run(home, rid, home.receipts.read(rid), file))
    versions, by_tree = _register_packages(home, view, packages)
    aliases = _follow_aliases(home, view, by_tree)
    result = MlflowExportResult(
        experiment_id=view.experiment_id,
        runs=tuple(runs),
        versions=tuple(versions),
        aliases=tuple(aliases),
        runs_created=sum(r.created for r in runs),
        versions_created=sum(v.created for v in versions),
        aliases_changed=sum(a.changed for a in aliases),
        abandoned_runs_deleted=view.abandoned,
    )
    receipt = build_receipt(
        MlflowExportReceipt,
        flow=flow,
        task="export_to_mlflow",
        started_at=started,
        inputs=[InputRef(role=f"{kind}:{i}", sha256=rid, ref="receipt") for i, (rid, kind) in enumerate(read)],
        parameters=MlflowExportParameters(tracking_uri=public_uri(uri), experiment=experiment),
        result=result,
    )
    return record(home, receipt)


def _package_file(home: Home, sha: str) -> Path:
    """The stored package tar; BlobMissingError naming the fix where this home's store lacks it."""
    if not home.blobs.has(sha):
        raise BlobMissingError(
            f"package {sha} is recorded in this home but its tar is not in the store (pruned, or built on another "
            "machine): pull it (`voxledger store pull`) and export again; nothing of it was written to MLflow"
        )
    return home.blobs.path_of(sha)


def _register_packages(
    home: Home, view: Projection, packages: dict[str, tuple[str, str]]
) -> tuple[list[ExportedVersion], dict[tuple[str, str], ExportedVersion]]:
    """A version per package (created where missing); also (line, checkpoint tree) -> the newest package's version."""
    known = view.versions()
    out: list[ExportedVersion] = []
    by_tree: dict[tuple[str, str], ExportedVersion] = {}
    for rid, (sha, tree) in packages.items():  # oldest first: a later package of a checkpoint wins its aliases
        line = _line_of_package(home, home.receipts.read(rid, PackageReceipt))
        name = model_name(line)
        if sha in known:
            v = ExportedVersion(
                package_sha256=sha, package_receipt=rid, model=known[sha][0], line=line, version=known[sha][1], created=False
            )
        else:
            view.register(name, line)
            run = view.client.get_run(view.runs[rid])
            made = view.client.create_model_version(
                name, source=f"{run.info.artifact_uri}/package", run_id=run.info.run_id, tags={PACKAGE_TAG: sha, RECEIPT_TAG: rid},
                description=f"voxledger package {sha}",
            )  # fmt: skip
            v = ExportedVersion(package_sha256=sha, package_receipt=rid, model=name, line=line, version=str(made.version), created=True)
            known[sha] = (name, v.version)
        out.append(v)
        by_tree[(line, tree)] = v
    return out, by_tree


def _follow_aliases(home: Home, view: Projection, by_tree: dict[tuple[str, str], ExportedVersion]) -> list[ExportedAlias]:
    """Set each line's aliases where its history leaves them (the newest move per line and alias)."""
    rows, _ = alias_moves(home.catalog, None, None)
    current: dict[tuple[str, str], str] = {}
    for line, alias, target, *_ in rows:  # ordered by line, then time: the last move wins
        current[(str(line), str(alias))] = str(target)
    lines_with_versions = {line for line, _ in by_tree}
    out: list[ExportedAlias] = []
    for (line, alias), target in sorted(current.items()):
        version = by_tree.get((line, target))
        name = model_name(line)
        changed = False
        if line in lines_with_versions:
            held = view.register(name, line).get(alias)
            held = None if held is None else str(held)
            if version is not None and held != version.version:
                view.client.set_registered_model_alias(version.model, alias, version.version)
                changed = True
            elif version is None and held is not None:
                view.client.delete_registered_model_alias(name, alias)
                changed = True
        out.append(
            ExportedAlias(
                model=name, line=line, alias=alias, target_sha256=target, version=version.version if version else None, changed=changed
            )
        )
    return out
