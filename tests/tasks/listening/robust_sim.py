"""Simulated packet sets for the robustness checks: honest noisy raters, and scripted raters that passed screening.

``wide_export`` exports the demo protocol over the ten test sentences with every rater hearing
every prompt (about 24 candidate ratings per rater: the bot score needs a few dozen), with a fixed
home secret and set id so the packets (and the script's answers) are the same every run; ``aggregate``
submits one seed's raters to a private copy of the home and aggregates them with the ratings stage;
``measure`` tallies flags and suspects over seeds 0 to SEEDS - 1 (run ``python -m tests.tasks.listening.robust_sim SEEDS``).
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.corpus_factory import SENTENCES
from tests.tasks.listening.conftest import DEMO_PLAN
from tests.tasks.listening.factory import make_stimuli, simulate_submission, write_json
from tests.tasks.listening.honest import CandidateBot, noisy_scorer, screened_bot
from voxledger.schemas.listening import KeyEntry, ListeningProtocol
from voxledger.schemas.listening_receipts import AggregateReceipt, RatingRow
from voxledger.stores.home import Home
from voxledger.tasks.listening import stats
from voxledger.tasks.listening.keys import SECRET_NAME, open_sealed_key, sealed_dir
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages import packets

RATERS = 8


@dataclass(frozen=True)
class Wide:
    """An exported packet set (home, receipt id, packet folders, key) and its protocol."""

    root: Path
    receipt_id: str
    packets: dict[str, Path]
    key: dict[str, KeyEntry]
    protocol: ListeningProtocol


def wide_export(root: Path, raters: int = RATERS) -> Wide:
    """The demo protocol, ``raters`` raters each hearing all ten sentences (A/B or ACR/MUSHRA, ``design.split``)."""
    demo = load_plan(DEMO_PLAN, ListeningProtocol)
    protocol = demo.model_copy(update={"design": demo.design.model_copy(update={"raters": raters, "raters_per_prompt": raters})})
    prompts = {f"p{i:02d}": ("news" if i % 2 == 0 else "chat", s) for i, s in enumerate(SENTENCES)}
    home = Home(root / "home")
    (sealed_dir(home) / SECRET_NAME).write_bytes(bytes(range(32)))  # a fixed secret and set id: the same packets every run
    with pytest.MonkeyPatch.context() as mp:
        calls = itertools.count(1)
        mp.setattr(packets.secrets, "token_hex", lambda n: f"{next(calls):0{2 * n}x}")
        out = packets.export_packets(home, protocol, make_stimuli(home, prompts), root / "packets", protocol_name="listening-wide.yaml")
    key, _ = open_sealed_key(home, out.receipt.parameters.key_commitment_sha256)
    return Wide(root, out.receipt_id, dict(out.packet_dirs), {e.pseudonym: e for e in key.entries}, protocol)


def aggregate(wide: Wide, work: Path, seed: int, bots: dict[str, CandidateBot]) -> tuple[AggregateReceipt, list[RatingRow], str]:
    """Seed ``seed``'s raters (``bots`` scripted, the rest honest with offsets -0.3, 0, +0.3) aggregated in a copy of the home.

    Returns the aggregate receipt, its unblinded rows and the home's root.
    """
    from voxledger.tasks.stages.ratings import aggregate_ratings

    shutil.copytree(wide.root / "home", work / "home")
    files = []
    for rater, folder in sorted(wide.packets.items()):
        honest = noisy_scorer(seed, rater, bias=0.3 * (int(rater[1:]) % 3 - 1))
        scorer = screened_bot(bots[rater], honest) if rater in bots else honest
        doc = simulate_submission(folder, wide.key, scorer, session=f"{seed:016x}{int(rater[1:]):016x}")
        files.append(write_json(work / f"{rater}.json", doc))
    home = Home(work / "home")
    out = aggregate_ratings(home, wide.receipt_id, files)
    rows = [RatingRow.model_validate(r) for r in json.loads(home.blobs.get_bytes(out.receipt.subject("ratings").sha256))]
    return out.receipt, rows, str(work / "home")


def without(rows: list[RatingRow], raters: set[str], protocol: ListeningProtocol) -> dict[tuple[str, str, str, str], str | None]:
    """The verdicts of the included raters' rows with ``raters`` left out."""
    kept = [r for r in rows if r.included and r.rater_id not in raters]
    directions = {c.name: c.direction for c in protocol.criteria}
    ranges = {c.name: (float(c.scale.min), float(c.scale.max)) for c in protocol.criteria}
    return {(d.criterion, d.task, d.a, d.b): d.better for d in stats.paired_deltas(kept, protocol.statistics, directions, ranges)}


def measure(seeds: int, root: Path) -> dict[int, dict[str, int]]:
    """Per number of scripted raters (0, 1, 2): raters flagged, scripts among the suspects or excluded, verdicts the scripts
    change, flagged."""
    wide = wide_export(root / "export")
    scripts = {r: CandidateBot(wide.packets[r]) for r in ("r01", "r02")}
    tally: dict[int, dict[str, int]] = {}
    for n in (0, 1, 2):
        bots = dict(list(scripts.items())[:n])
        t = tally.setdefault(n, dict.fromkeys(("runs", "verdicts", "flagged_verdicts", "honest_flagged", "scripts", "scripts_flagged",
                                               "scripts_suspected", "scripts_excluded", "changed_by_scripts", "changed_and_flagged"), 0))  # fmt: skip
        for seed in range(seeds):
            receipt, rows, _ = aggregate(wide, root / f"n{n}s{seed}", seed, bots)
            rb = receipt.result.robustness
            assert rb is not None
            included = {s.rater_id for s in receipt.result.screening if s.included}
            clean = without(rows, set(bots), wide.protocol)
            t["runs"] += 1
            t["verdicts"] += len(rb.verdicts)
            t["flagged_verdicts"] += rb.flagged_verdicts
            t["honest_flagged"] += sum(s.flagged for s in rb.bot_scores if s.rater_id not in bots)
            t["scripts"] += len(bots)
            t["scripts_flagged"] += sum(s.flagged for s in rb.bot_scores if s.rater_id in bots)
            t["scripts_suspected"] += len(set(rb.suspects) & set(bots))
            t["scripts_excluded"] += sum(r not in included for r in bots)
            for v in rb.verdicts:
                changed = bool(set(bots) & included) and clean.get((v.criterion, v.task, v.a, v.b)) != v.better
                t["changed_by_scripts"] += changed
                t["changed_and_flagged"] += changed and v.flagged
            print(n, seed, json.dumps(t), flush=True)
    return tally


if __name__ == "__main__":  # python -m tests.tasks.listening.robust_sim SEEDS
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(measure(int(sys.argv[1]), Path(tmp)), indent=1))
