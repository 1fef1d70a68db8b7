"""Every VOXLEDGER_* variable is a typed, documented field of one model, read fresh on each call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voxledger.schemas.errors import SettingsError, VoxledgerError
from voxledger.settings import GROUPS, PREFIX, VoxledgerSettings, load_settings, setting_fields

PACKAGE = Path(__file__).resolve().parents[1] / "voxledger"
FIELDS = list(setting_fields())


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from no VOXLEDGER_* variable at all (the developer's own stay outside)."""
    import os

    for name in [n for n in os.environ if n.upper().startswith(PREFIX)]:
        monkeypatch.delenv(name)


def test_every_variable_is_a_documented_field_with_a_default() -> None:
    assert len(FIELDS) == 33 and {f.group for f in FIELDS} == {"", *GROUPS}
    assert len({f.env for f in FIELDS}) == len(FIELDS)
    for f in FIELDS:
        assert f.info.description and not f.info.is_required(), f.env
    assert load_settings() == VoxledgerSettings()


def test_every_name_in_the_package_source_is_a_field() -> None:
    """A variable mentioned anywhere under voxledger/ (read, set for a child, named in a message) is
    one the model reads; a name ending in ``_`` (``VOXLEDGER_S3_*``) or a bare group name stands for a group."""
    names = {f.env for f in FIELDS}
    groups = {PREFIX + g.upper() for g in GROUPS}
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in re.findall(r"VOXLEDGER_[A-Z0-9_]+", path.read_text()):
            found.setdefault(name, set()).add(path.relative_to(PACKAGE.parent).as_posix())
    unknown = {n: sorted(where) for n, where in found.items() if n not in names and n.rstrip("_") not in groups}
    assert len(found) >= 15, f"only {len(found)} names found: is the scan broken?"
    assert not unknown, f"VOXLEDGER_* names that are not settings: {unknown}"


def test_names_groups_and_types(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"VOXLEDGER_HOME": "/data/home", "VOXLEDGER_S3_PART_SIZE_MIB": "64", "VOXLEDGER_S3_CONDITIONAL_WRITES": "0",
                        "VOXLEDGER_COSYVOICE_MODEL_DIR": "/m", "VOXLEDGER_BENCH_SCALE_CLIPS": "10", "VOXLEDGER_SYNC": ""}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    s = load_settings()
    assert (str(s.home), s.s3.part_size_mib, s.s3.conditional_writes) == ("/data/home", 64, False)
    assert (str(s.cosyvoice.model_dir), s.bench.scale_clips, s.sync) == ("/m", 10, False)  # empty counts as unset
    monkeypatch.setenv("VOXLEDGER_S3_WORKERS", "3")  # nothing is cached: the next call sees it
    assert load_settings().s3.workers == 3


@pytest.mark.parametrize("env", [f.env for f in FIELDS if f.info.annotation is bool])
def test_booleans_parse_one_way(env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    field = next(f for f in FIELDS if f.env == env)

    def value() -> bool:
        s = load_settings()
        return bool(getattr(getattr(s, field.group) if field.group else s, field.name))

    for raw, parsed in (("1", True), ("true", True), ("yes", True), ("on", True), ("0", False), ("false", False), ("no", False)):
        monkeypatch.setenv(env, raw)
        assert value() is parsed, (env, raw)
    monkeypatch.setenv(env, "maybe")
    with pytest.raises(SettingsError, match=f"{env}='maybe' is not a yes/no value"):
        load_settings()


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("VOXLEDGER_S3_WORKERS", "abc", "VOXLEDGER_S3_WORKERS='abc' is not a whole number of at least 1; fix it or unset it (default: 16)"),
        ("VOXLEDGER_S3_WORKERS", "0", "VOXLEDGER_S3_WORKERS='0' is not a whole number of at least 1"),
        ("VOXLEDGER_PREFECT", "server", "VOXLEDGER_PREFECT='server' is not one of home, ephemeral"),
        ("VOXLEDGER_COSYVOICE_DEVICE", "tpu", "VOXLEDGER_COSYVOICE_DEVICE='tpu' is not auto, cpu, cuda or cuda:N"),
        ("VOXLEDGER_BENCH_ROUNDS", "2.5", "VOXLEDGER_BENCH_ROUNDS='2.5' is not a whole number"),
        ("VOXLEDGER_S3", "not json", "VOXLEDGER_S3"),
        (
            "VOXLEDGER_S3_ENDPOINT_URL",
            "file:///tmp/store",
            "VOXLEDGER_S3_ENDPOINT_URL: 'file:///tmp/store' is not an http(s) URL with a host",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_it(env: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    text = str(info.value)
    assert isinstance(info.value, VoxledgerError) and message in text and "\n" not in text, text


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXLEDGER_S3_WORKERS", "many")
    monkeypatch.setenv("VOXLEDGER_READ_ONLY", "perhaps")
    with pytest.raises(SettingsError, match="VOXLEDGER_READ_ONLY='perhaps'.*; VOXLEDGER_S3_WORKERS='many'"):
        load_settings()
