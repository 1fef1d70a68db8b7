"""Run a corpus audit end to end and record its receipt (plain function; the flow wraps it)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.audit import AsrAgreementResult, AuditParameters, AuditPolicy, AuditReceipt, AuditResult, Finding
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.hashing import default_workers
from voxledger.stores.home import Home
from voxledger.stores.memo import DerivedMemo
from voxledger.stores.trees import TREE_MEDIA_TYPE, manifest_bytes
from voxledger.tasks.audit import checks
from voxledger.tasks.audit.measure import FileFacts, measure_file
from voxledger.tasks.corpus.audio import segment_identity
from voxledger.tasks.corpus.manifests import LoadedCorpus, load_corpus
from voxledger.tasks.corpus.paths import tree_name
from voxledger.tasks.corpus.sources import audio_digests, audio_tree
from voxledger.tasks.heap import keep_freed_memory
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.contract import corpus_only, need_corpus

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.reproduce import Preparation

MANIFEST_MEDIA_TYPE = "application/vnd.voxledger.manifest+json"


def audit_corpus_fn(
    home: Home,
    corpus_path: Path,
    policy: AuditPolicy,
    *,
    policy_name: str,
    flow: str = "audit_corpus",
    audio_roots: tuple[Path, ...] = (),
    progress: Callable[[str], None] | None = None,
) -> StageOutcome[AuditReceipt]:
    """Audit a corpus; the receipt is recorded whatever the verdict (a failure is evidence too).

    ``audio_roots``: folders outside the corpus its manifest may point into; they only resolve
    paths and never enter the cache key (audio is bound by its content digest).
    """
    started = utc_now()
    plan_rid, policy_sha = register_plan(home, policy, source_name=policy_name, flow=flow)
    corpus = load_corpus(corpus_path, audio_roots=audio_roots)
    digests, paths = audio_digests(corpus, home.stat_cache)
    tree = audio_tree(corpus, digests, paths)
    tree_sha = home.blobs.put_bytes(manifest_bytes(tree))
    manifest_sha = home.blobs.put_bytes(canonical_bytes(corpus.utterances))
    file_shas = {f.relative_to(corpus.root).as_posix(): home.blobs.put_file(f) for f in corpus.manifest_files}
    key = cache_key(
        "audit",
        {"manifest": manifest_sha, "audio_tree": tree_sha, **file_shas},
        policy_sha,
        {"issues": [i.__dict__ for i in corpus.issues]},
    )
    hit = reuse(home, key, AuditReceipt)
    if hit is not None:
        return hit
    store = home.blobs if policy.store_audio else None
    keep_freed_memory()  # per-clip buffers reuse heap pages instead of faulting in new ones
    with home.blobs.deferred_sync():  # every audio object durable at once, before the receipt
        result = _check(corpus, digests, paths, policy, progress, store, home.memo)
        if store is not None:  # recordings that only segments read (whole files were stored while measured)
            by_name = {tree_name(u.audio): paths[u.id] for u in corpus.utterances.utterances if u.id in paths}
            for entry in tree.entries:
                if not store.intact(entry.sha256):
                    store.put_file(by_name[entry.path], expected_sha256=entry.sha256)
    receipt = build_receipt(
        AuditReceipt,
        flow=flow,
        task="audit_corpus",
        started_at=started,
        key=key,
        subjects=[
            artifact(home.blobs, "manifest", manifest_sha, MANIFEST_MEDIA_TYPE),
            artifact(home.blobs, "audio_tree", tree_sha, TREE_MEDIA_TYPE),
        ],
        inputs=[
            InputRef(role="policy", sha256=plan_rid, ref="receipt"),
            *(InputRef(role="manifest_file", sha256=s, ref="artifact") for s in sorted(set(file_shas.values()))),
        ],
        parameters=AuditParameters(
            corpus_name=corpus.utterances.name, policy_sha256=policy_sha, manifest_sha256=manifest_sha, audio_tree_sha256=tree_sha
        ),
        result=result,
    )
    return record(home, receipt)


def _check(
    corpus: LoadedCorpus,
    digests: dict[str, str],
    paths: dict[str, Path],
    policy: AuditPolicy,
    progress: Callable[[str], None] | None = None,
    store: LocalBlobStore | None = None,
    memo: DerivedMemo | None = None,
) -> AuditResult:
    utts = list(corpus.utterances.utterances)
    done = [0]

    def measure(u: Any) -> FileFacts:
        out = measure_file(
            corpus.root,
            u,
            policy,
            audio_roots=corpus.audio_roots,
            where=corpus.origins.get(u.id, ""),
            expected_sha256=digests.get(u.id),
            store=store,
            path=paths.get(u.id),
        )
        done[0] += 1
        if progress is not None and (done[0] % 50 == 0 or done[0] == len(utts)):
            progress(f"audit: measured {done[0]}/{len(utts)} files")
        return out

    with ThreadPoolExecutor(max_workers=default_workers()) as pool:
        facts: dict[str, FileFacts] = dict(zip([u.id for u in utts], pool.map(measure, utts), strict=True))
    # a segment is known by its recording's digest plus its sample range: two cuts of one
    # recording are not duplicates, the same cut listed twice is
    digests = {uid: segment_identity(d, facts[uid].samples) if facts[uid].samples else d for uid, d in digests.items()}  # type: ignore[arg-type]
    findings: list[Finding] = [
        Finding(code=i.code, severity="error", message=f"{i.file}:{i.line}: {i.message}", file=i.file, line=i.line)  # type: ignore[arg-type]
        for i in corpus.issues
    ]
    if not utts:  # nothing to train on is never a pass, whatever else the manifest held
        findings.append(
            Finding(
                code="empty_corpus",
                severity="error",
                message=(
                    f"the corpus at {corpus.root} has no utterances"
                    + (
                        f" (read {', '.join(map(str, corpus.manifest_files))}, {_line_count(corpus.manifest_files)} non-blank line(s))"
                        if corpus.manifest_files
                        else ""
                    )
                    + ": check the manifest path and its lines, one JSON object per line with id, audio, text, speaker and split "
                    "(docs/corpora.md lists the formats; issues above, if any, say why lines were dropped)"
                ),
            )
        )
    findings += checks.leakage(utts, policy.leakage)
    findings += checks.speaker_lookalikes(utts, policy)
    findings += checks.duplicates(utts, digests, facts, policy)
    for u in utts:
        findings += checks.transcript(u)
        findings += checks.file_findings(u, facts[u.id], policy)
    model_findings, agreement = _optional_model_checks(utts, facts, policy, digests, memo, progress)
    findings += model_findings
    by_code: dict[str, int] = {}
    by_sev = {"error": 0, "warning": 0, "info": 0}
    for f in findings:
        by_code[f.code] = by_code.get(f.code, 0) + 1
        by_sev[f.severity] += 1
    return AuditResult(
        verdict="fail" if by_sev["error"] else "pass",
        n_utterances=len(utts),
        counts_by_code=dict(sorted(by_code.items())),
        counts_by_severity=by_sev,
        findings=tuple(findings),
        stats=checks.corpus_stats(utts, facts),
        asr_agreement=agreement,
    )


def _optional_model_checks(
    utts: list,  # type: ignore[type-arg]
    facts: dict[str, FileFacts],
    policy: AuditPolicy,
    audio_ids: dict[str, str] | None = None,
    memo: DerivedMemo | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Finding], AsrAgreementResult | None]:
    """ASR agreement and DNSMOS noise screen: off by default, switched on by the policy. ``audio_ids``
    (each utterance's audio or cut digest) and the home's ``memo`` let ASR agreement read back the
    transcript of a cut it heard before with the same model and settings. Returns the findings and
    every clip's ASR agreement (None when that check is off)."""
    from voxledger.tasks.audit.model_checks import asr_agreement, noise_screen

    out: list[Finding] = []
    agreement = None
    readable = [u for u in utts if facts[u.id].stats is not None and facts[u.id].path is not None]
    if policy.asr_agreement.enabled:
        found, agreement = asr_agreement(readable, facts, policy.asr_agreement, audio_ids, memo, progress)
        out += found
    if policy.noise_screen.enabled:
        out += noise_screen(readable, facts, policy.noise_screen)
    return out, agreement


def _line_count(files: tuple[Path, ...]) -> int:
    """Non-blank lines in ``files`` (for the empty-corpus message; an unreadable file counts none)."""
    total = 0
    for f in files:
        try:
            total += sum(1 for line in f.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())
        except OSError:
            pass
    return total


# The stage contract (tasks/stages/contract.py).
run = audit_corpus_fn
inputs = corpus_only


def verdict(out: StageOutcome[AuditReceipt]) -> None:
    """Raise AuditFailedError (naming the receipt) unless the audit passed."""
    from collections import Counter

    from voxledger.schemas.errors import AuditFailedError

    r = out.receipt.result
    if r.verdict != "pass":
        errors = r.counts_by_severity["error"]
        by_code = Counter(f.code for f in r.findings if f.severity == "error")
        warnings = r.counts_by_severity.get("warning", 0)
        raise AuditFailedError(
            f"audit of {out.receipt.parameters.corpus_name} failed: {errors} error finding(s) {dict(sorted(by_code.items()))}"
            f" (and {warnings} warning(s)); receipt {out.receipt_id} (voxledger receipt show {out.receipt_id[:12]} lists them)",
            receipt_id=out.receipt_id,
        )


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``audit`` flow's arguments: the corpus (its manifest files checked) and the recorded policy."""
    from voxledger.tasks.stages.reproduce import plan_ref

    r = cast(AuditReceipt, prep.receipt)
    _check_manifest_files(r, prep.rid, need_corpus(corpus, prep))
    return {"corpus": str(corpus), "plan": plan_ref(home, r, "policy")}


def compare(h: Home, s: Home, original: AuditReceipt, rerun: AuditReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The verdict, the findings and the audited digests, which a re-run must equal."""
    from voxledger.tasks.reproduction import compare as cmp

    return cmp.compare_audit(original, rerun)


def summary(receipt: AuditReceipt) -> str:
    """The verdict and the findings by severity."""
    r = receipt.result
    counts = ", ".join(f"{n} {sev}(s)" for sev, n in sorted(r.counts_by_severity.items()) if n) or "no findings"
    return f"{r.verdict}: {counts}"


def _check_manifest_files(audit: AuditReceipt, rid: str, corpus: Path) -> None:
    """Refuse ``corpus`` unless its manifest files hash to the ones the audit read."""
    from voxledger.schemas.errors import ReproductionError
    from voxledger.stores.hashing import sha256_file
    from voxledger.tasks.corpus.manifests import load_corpus

    loaded = load_corpus(corpus)
    recorded = {i.sha256 for i in audit.inputs if i.role == "manifest_file"}
    now = {f.relative_to(loaded.root).as_posix(): sha256_file(f) for f in loaded.manifest_files}
    changed = sorted(name for name, sha in now.items() if sha not in recorded)
    if changed or len(set(now.values())) != len(recorded):
        raise ReproductionError(
            f"corpus {corpus}: manifest file(s) {changed or sorted(now)} differ from the ones the audit read "
            f"({len(recorded)} recorded by digest): this is not the corpus of receipt {rid[:12]}; give the original corpus"
        )
