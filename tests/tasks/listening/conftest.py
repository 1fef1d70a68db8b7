"""Listening-test fixtures: a protocol with all three task types and espeak stimuli in a home."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tasks.listening.factory import make_stimuli
from voxledger.schemas.listening import KeyEntry, ListeningProtocol, StimulusSet
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan

DEMO_PLAN = Path(__file__).resolve().parents[3] / "plans" / "listening-demo.yaml"


@dataclass(frozen=True)
class Exported:
    """An exported packet set in a private home."""

    home: Home
    receipt_id: str
    receipt: PacketSetReceipt
    packets: Path
    key: dict[str, KeyEntry]


@pytest.fixture(scope="session")
def protocol() -> ListeningProtocol:
    """The demo protocol (ACR + MUSHRA + A/B, 6 raters, k = 3, gold and attention items)."""
    return load_plan(DEMO_PLAN, ListeningProtocol)


@pytest.fixture
def stimuli(home: Home) -> StimulusSet:
    """Six prompts x three espeak candidates, audio in the test's home."""
    return make_stimuli(home)


@pytest.fixture(scope="session")
def exported_once(tmp_path_factory: pytest.TempPathFactory, protocol: ListeningProtocol) -> tuple[Path, str]:
    """One export of the demo protocol per test session: (folder holding home/ and packets/, receipt id)."""
    from voxledger.tasks.stages.packets import export_packets

    root = tmp_path_factory.mktemp("exported")
    home = Home(root / "home")
    outcome = export_packets(home, protocol, make_stimuli(home), root / "packets", protocol_name="listening-demo.yaml")
    return root, outcome.receipt_id


@pytest.fixture
def exported(tmp_path: Path, exported_once: tuple[Path, str]):  # type: ignore[no-untyped-def]
    """A private copy of the module's export: (home, packet-set receipt, packets folder, key by pseudonym)."""
    from voxledger.tasks.listening.keys import open_sealed_key
    from voxledger.tasks.stages.ratings import load_packet_set

    root, rid = exported_once
    shutil.copytree(root, tmp_path / "x")
    home = Home(tmp_path / "x" / "home")
    receipt = load_packet_set(home, rid)
    key, _ = open_sealed_key(home, receipt.parameters.key_commitment_sha256)
    return Exported(home, rid, receipt, tmp_path / "x" / "packets", {e.pseudonym: e for e in key.entries})
