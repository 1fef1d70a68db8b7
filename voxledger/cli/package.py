"""``voxledger package``: build, verify, attest and sign reproducible adapter packages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from voxledger.cli.common import emit_json, json_option, open_home, resolve_node, resolve_receipt, run_flow
from voxledger.schemas.errors import BlobMissingError, CatalogError, VoxledgerError


@click.group()
def package() -> None:
    """Adapter packages: deterministic tars bound to their receipts."""


def _checkpoint(ctx: click.Context, run_id: str, choice: str) -> str:
    doc = open_home(ctx).receipts.read_document(run_id)
    if choice in ("best", "last"):
        return str(next(a["sha256"] for a in doc["subjects"] if a["role"] == choice))
    return resolve_node(ctx, choice)  # a whole digest or a unique prefix, as the gate hint and `eval run --bind` print them


@package.command("build")
@click.argument("training_run")
@click.option("--checkpoint", default="best", show_default=True, help="best, last, or a checkpoint tree digest.")
@click.option("--retention", type=click.Path(file_okay=False, path_type=Path), default=None, help="Publish the package into this folder.")
@click.option("--promotion", default=None, help="Promotion receipt that promoted this checkpoint.")
@click.option("--evaluation", "evaluations", multiple=True, help="Evaluation receipt of this checkpoint (repeatable).")
@click.option("--probe-seed", type=int, default=0, show_default=True, help="Seed of the reload and equivalence probe.")
@click.option(
    "--unpromoted",
    is_flag=True,
    help="Package a checkpoint no promotion receipt vouches for (no --promotion); the package says so (no promotion bound).",
)
@json_option("the result")
@click.pass_context
def build(
    ctx: click.Context,
    training_run: str,
    checkpoint: str,
    retention: Path | None,
    promotion: str | None,
    evaluations: tuple[str, ...],
    probe_seed: int,
    unpromoted: bool,
    as_json: bool,
) -> None:
    """Package a LoRA checkpoint with its receipts; reload-check, merge-check and publish it.

    A checkpoint is packaged with the promotion receipt that promoted it (--promotion); packaging
    one that passed no gate takes --unpromoted, and its package binds no promotion.

    Example: voxledger package build 3fa2c1d9 --checkpoint best --promotion 7be1c0a2 --retention ./releases
    """

    if promotion is None and not unpromoted:
        raise click.UsageError(
            "no --promotion given: this checkpoint would be packaged without a gate vouching for it. Pass the promotion receipt "
            "that promoted it (voxledger receipt show PROMOTION), or --unpromoted to package it anyway (the package says so)"
        )
    if promotion is not None and unpromoted:
        raise click.UsageError("--promotion and --unpromoted contradict each other; give one")
    run_id = resolve_receipt(ctx, training_run, "training_run")
    out = run_flow(
        ctx,
        "voxledger.flows.package:package",
        run_id,
        _checkpoint(ctx, run_id, checkpoint),
        resolve_receipt(ctx, promotion, "promotion") if promotion else None,
        tuple(resolve_receipt(ctx, e, "evaluation") for e in evaluations),
        str(retention.absolute()) if retention else None,
        probe_seed,
        quiet=as_json,
    )
    r = out.receipt.result
    summary = {
        "receipt": out.receipt_id,
        "package_sha256": out.package_sha256,
        "size_bytes": r.size_bytes,
        "cached": out.cached,
        "reload_bitwise_equal": r.reload.bitwise_equal,
        "reload_max_abs_err": r.reload.max_abs_err,
        "equivalence_band": r.equivalence_band,
        "stage_rel": r.stage_rel,
        "published": str(out.published.path) if out.published else None,
        "promotion": out.receipt.parameters.promotion_receipt,
    }
    if as_json:
        emit_json(summary)
        return
    vouched = f"promoted by {promotion}" if promotion else "UNPROMOTED: no promotion receipt vouches for this checkpoint"
    click.echo(f"package {out.package_sha256} ({r.size_bytes} bytes){' [cached]' if out.cached else ''}; {vouched}")
    click.echo(
        f"reload: bitwise={r.reload.bitwise_equal} max|err|={r.reload.max_abs_err:.3e}; merged export: {r.equivalence_band} {r.stage_rel}"
    )
    if out.published:
        click.echo(f"published {out.published.path}{' (already present)' if out.published.already_present else ''}")
    click.echo(f"receipt {out.receipt_id}")


def _locate(ctx: click.Context, ref: str) -> tuple[Path, bool]:
    """(package file, whether it is the store's copy): an existing path, or a package digest (prefix)."""
    path = Path(ref)
    if path.exists():
        return path, False
    home = open_home(ctx)
    digest = ref.strip().lower()
    if len(digest) < 8 or not all(c in "0123456789abcdef" for c in digest):
        raise CatalogError(f"{ref!r} is neither a file nor a package digest (64 hex, or a unique prefix of >= 8); give the .tar path")
    if len(digest) != 64:
        from voxledger.stores.queries import packages_with_prefix

        rows = packages_with_prefix(home.catalog, digest)
        if len(rows) != 1:
            raise CatalogError(f"{ref!r} is not a file and {'no' if not rows else 'more than one'} recorded package digest starts with it")
        digest = rows[0]
    if len(digest) != 64 or not home.blobs.has(digest):
        raise BlobMissingError(f"{ref!r} is neither a file nor a package digest in the store at {home.blobs.root}; give the .tar path")
    return home.blobs.path_of(digest), True


def _verified_package(ctx: click.Context, ref: str) -> tuple[Path, bool, Any]:
    """(file, whether it is the store's copy, ``Verified``): every member checked against the
    manifest and, for a package named by digest, the whole file (tar padding and end blocks
    included) hashed against that digest.

    Raises DigestMismatchError when the file's bytes do not hash to the digest that named it.
    """
    from voxledger.schemas.errors import DigestMismatchError
    from voxledger.tasks.packaging.archive import verify_package

    path, in_store = _locate(ctx, ref)
    verified = verify_package(path)
    named = path.parent.name + path.name if in_store else None
    if named is not None and verified.sha256 != named:
        raise DigestMismatchError(
            f"package {named}: the stored file hashes to {verified.sha256} (its members match the manifest, other bytes "
            "of the tar differ); restore it from a replica (`voxledger store pull`) or rebuild the package"
        )
    return path, in_store, verified


def _package_receipt(ctx: click.Context, sha256: str) -> tuple[str | None, dict[str, Any] | None]:
    from voxledger.stores.home import resolve_home

    if not resolve_home(ctx.find_root().obj["home"]).is_dir():
        return None, None
    home = open_home(ctx)
    from voxledger.stores.queries import package_receipt_of

    rid = package_receipt_of(home.catalog, sha256)
    return (rid, home.receipts.read_document(rid)) if rid else (None, None)


@package.command("verify")
@click.argument("package_ref", metavar="PATH-OR-DIGEST")
@click.option(
    "--key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="Public key: also check the DSSE signature."
)
@click.option(
    "--attestation",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="DSSE envelope (default PACKAGE.dsse.json).",
)
@click.option(
    "--signature",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="For a folder: its OMS signature (default DIR/model.sig).",
)
@click.option("--reproduce", is_flag=True, help="Also re-run each evaluation the package binds and report which of its claims hold here.")
@click.option(
    "--corpus",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="With --reproduce: the corpus the evaluations read (prompts' recordings and speaker references).",
)
@click.option("--deep", is_flag=True, help="With --reproduce: trust no stat cache, read and hash every file the reproductions check.")
@json_option("the result")
@click.pass_context
def verify(
    ctx: click.Context,
    package_ref: str,
    key: Path | None,
    attestation: Path | None,
    signature: Path | None,
    reproduce: bool,
    corpus: Path | None,
    deep: bool,
    as_json: bool,
) -> None:
    """Re-hash every member against the manifest (naming any that differ) and, for a package named by
    digest, the whole file against that digest; optionally check a signature. With --reproduce,
    re-derive the package's evaluation claims here (exit status 1 when one does not hold).
    A folder (a `package export`, or an unpacked package) is checked against its OMS signature
    (DIR/model.sig) with --key, an ECDSA public key, by the model-signing library's own verifier.

    Example: voxledger package verify releases/t-lora-spk_t-613c67a6.tar --key release.pub

    Example: voxledger package verify ./spk_t-peft --key ./keys/oms.pub

    Example: voxledger package verify releases/t-lora-spk_t-613c67a6.tar --reproduce --corpus ./demo/corpus
    """
    from voxledger.tasks.packaging.attest import verify_envelope

    if Path(package_ref).is_dir():
        _verify_folder(Path(package_ref), key, signature, as_json)
        return
    if signature is not None:
        raise click.UsageError("--signature names an OMS model.sig, which signs a folder: give the folder (`package sign` wrote it)")
    path, in_store, verified = _verified_package(ctx, package_ref)
    signed_by = None
    if key is not None:
        envelope_path = attestation or (None if in_store else path.with_name(path.name + ".dsse.json"))
        if envelope_path is None or not envelope_path.is_file():
            raise click.ClickException(f"no attestation at {envelope_path}; pass --attestation FILE (written by `package attest --key`)")
        statement = verify_envelope(json.loads(envelope_path.read_text()), key, verified.sha256)
        if statement["predicate"]["manifest"] != json.loads(verified.manifest_bytes):
            raise click.ClickException(f"{envelope_path} signs a different manifest than {path} holds")
        signed_by = str(key)
    result: dict[str, Any] = {
        "package": str(path),
        "sha256": verified.sha256,
        "members": len(verified.contents),
        "signature_key": signed_by,
    }
    if not as_json:
        click.echo(
            f"ok: {path} ({verified.sha256}), {len(verified.contents)} members match the manifest"
            + (f"; signature verified with {key}" if key else "")
        )
    trust = {"trusted_files": 0, "deep": deep}  # the package's own members are always read and hashed
    if reproduce:
        result["claims"] = _reproduce_claims(ctx, verified, corpus, as_json, deep, trust)
    result["stat_cache"] = trust
    if not as_json:
        click.echo(
            "stat cache: not trusted (--deep), every file read"
            if deep
            else f"stat cache: trusted for {trust['trusted_files']} file(s)"
            + (" (--deep reads them all)" if trust["trusted_files"] else "")
        )
    if as_json:
        emit_json(result)
    if reproduce and any(not c["holds"] for c in result["claims"]):
        ctx.exit(1)


def _verify_folder(folder: Path, key: Path | None, signature: Path | None, as_json: bool) -> None:
    """``package verify DIR``: the folder's OMS signature, checked by the model-signing library."""
    from voxledger.tasks.packaging.oms import SIGNATURE_NAME, verify_folder

    if key is None:
        raise click.UsageError(f"{folder} is a folder: its OMS signature is checked with --key (the ECDSA public key)")
    n = verify_folder(folder, key, signature)
    sig = signature or folder / SIGNATURE_NAME
    if as_json:
        emit_json({"folder": str(folder), "signature": str(sig), "files": n, "signature_key": str(key), "format": "oms-v1.0"})
    else:
        click.echo(f"ok: {folder}: OMS signature {sig} verified with {key} over {n} file(s)")


def _reproduce_claims(
    ctx: click.Context, verified: Any, corpus: Path | None, as_json: bool, deep: bool, trust: dict[str, Any]
) -> list[dict[str, Any]]:
    """Re-run each evaluation the package binds (``voxledger reproduce``) and list each metric claim with whether it holds
    here; adds the files each reproduction took on a stat cache's word to ``trust["trusted_files"]``."""
    from voxledger.schemas.errors import ReproductionError
    from voxledger.tasks.stages.reproduce import package_evaluations

    home = open_home(ctx)
    claims: list[dict[str, Any]] = []
    for rid, bound in package_evaluations(verified.manifest, verified.contents):
        if not bound:
            raise ReproductionError(f"package evaluation {rid[:12]} did not evaluate this package's adapter (no candidate binds its tree)")
        if not home.receipts.has(rid):
            raise ReproductionError(
                f"evaluation {rid[:12]} that the package binds is not in home {home.root}: its plan and base are fetched from there "
                "by digest; pull them first (`voxledger store pull`) or pass --home"
            )
        out = run_flow(
            ctx,
            "voxledger.flows.reproduce:reproduce",
            rid,
            str(corpus.absolute()) if corpus else None,
            None,
            False,
            None,
            deep,
            quiet=as_json,
        )
        trust["trusted_files"] += out.receipt.parameters.stat_cache_trusted or 0
        for c in out.receipt.result.comparisons:
            if c.name.startswith("metric:") or c.name == "prompt_agreement":
                claims.append(
                    {"evaluation": rid, "claim": c.name, "holds": c.verdict != "differs", "verdict": c.verdict, "reason": c.reason}
                )
        if not as_json:
            held = sum(c["holds"] for c in claims if c["evaluation"] == rid)
            total = sum(1 for c in claims if c["evaluation"] == rid)
            click.echo(
                f"evaluation {rid[:12]}: {held}/{total} claims hold here (reproduction {out.receipt.result.verdict}, receipt {out.receipt_id})"
            )
            for c in claims:
                if c["evaluation"] == rid and not c["holds"]:
                    click.echo(f"  does not hold: {c['claim']}: {c['reason']}")
    return claims


@package.command("attest")
@click.argument("package_ref", metavar="PACKAGE")
@click.option(
    "--key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="ed25519 private key: write a signed DSSE envelope.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Output file (default PACKAGE.intoto.json, or PACKAGE.dsse.json with --key).",
)
@click.pass_context
def attest(ctx: click.Context, package_ref: str, key: Path | None, output: Path | None) -> None:
    """Write an in-toto Statement (subject = package digest) with an SLSA-shaped view; sign it with --key.

    Example: voxledger package attest releases/t-lora-spk_t-613c67a6.tar --key release.key
    """
    from voxledger.tasks.packaging.attest import package_statement, sign_statement
    from voxledger.tasks.stages.package import publication_name

    path, in_store, verified = _verified_package(ctx, package_ref)
    rid, doc = _package_receipt(ctx, verified.sha256)
    name = publication_name(verified.manifest.name, verified.sha256) if in_store else path.name
    statement = package_statement(verified.sha256, name, verified.manifest, rid, doc)
    document = sign_statement(statement, key) if key else statement
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if output is None and in_store:
        click.echo(text, nl=False)  # never write next to the store's objects
        return
    output = output or path.with_name(path.name + (".dsse.json" if key else ".intoto.json"))
    try:
        with open(output, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError as exc:
        raise VoxledgerError(f"{output} exists; attestations are never overwritten: pass -o with a new name") from exc
    click.echo(f"wrote {output} ({'signed DSSE envelope' if key else 'unsigned statement'}) for {verified.sha256}")


@package.command("export")
@click.argument("package_ref", metavar="PACKAGE")
@click.argument("dest", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["peft"]),
    default="peft",
    show_default=True,
    help="peft: a folder peft.PeftModel.from_pretrained loads, with a model card (README.md) built from the receipts.",
)
@json_option("the result")
@click.pass_context
def export(ctx: click.Context, package_ref: str, dest: Path, fmt: str, as_json: bool) -> None:
    """Write a package out as a folder another ecosystem loads; DIR must not exist. Recorded as an adapter_export receipt.

    The same package always gives the same folder (same tree digest).

    Example: voxledger package export releases/t-lora-spk_t-613c67a6.tar --format peft ./spk_t-peft
    """
    from voxledger.tasks.packaging.peft_export import check_destination

    check_destination(dest)
    path, in_store = _locate(ctx, package_ref)
    package_arg = path.parent.name + path.name if in_store else str(path.absolute())
    out = run_flow(ctx, "voxledger.flows.package_export:export_package", package_arg, str(dest.absolute()), fmt, quiet=as_json)
    r = out.receipt.result
    summary = {
        "receipt": out.receipt_id,
        "cached": out.cached,
        "package_sha256": out.receipt.parameters.package_sha256,
        "folder": str(dest),
        "tree_sha256": r.tree_sha256,
        "files": [f.path for f in r.files],
        "base_model_name_or_path": r.base_model_name_or_path,
        "gate_verdict": r.gate_verdict,
    }
    if as_json:
        emit_json(summary)
        return
    click.echo(f"wrote {dest} ({fmt}: {', '.join(summary['files'])}), tree {r.tree_sha256}{' [cached]' if out.cached else ''}")
    click.echo(f"base {r.base_model_name_or_path}; gate verdict: {r.gate_verdict}; {len(r.not_measured)} thing(s) not measured (README.md)")
    click.echo(f"receipt {out.receipt_id}")


@package.command("keygen")
@click.argument("prefix", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--type",
    "key_type",
    type=click.Choice(["ed25519", "ecdsa-p256"]),
    default="ed25519",
    show_default=True,
    help="ed25519 signs `package attest` envelopes; ecdsa-p256 signs OMS model.sig (`package sign`).",
)
def keygen(prefix: Path, key_type: str) -> None:
    """Write a key pair: PREFIX.key (private, mode 0600) and PREFIX.pub.

    Example: voxledger package keygen ./keys/release

    Example: voxledger package keygen ./keys/oms --type ecdsa-p256
    """
    from voxledger.tasks.packaging.attest import write_keypair

    if not prefix.absolute().parent.is_dir():
        raise click.BadParameter(f"folder {prefix.parent} does not exist; create it first (mkdir -p {prefix.parent})", param_hint="PREFIX")
    key_path, pub_path = write_keypair(prefix, key_type)  # type: ignore[arg-type]  # click.Choice holds the literal's values
    click.echo(f"wrote {key_path} (0600) and {pub_path} ({key_type})")


@package.command("sign")
@click.argument("folder", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="ECDSA P-256 private key (`package keygen --type ecdsa-p256`).",
)
def sign(folder: Path, key: Path) -> None:
    """Write DIR/model.sig: an OpenSSF model signature (OMS v1.0) over every file of DIR, which
    `model_signing verify key DIR --signature DIR/model.sig --public_key KEY.pub` checks.

    DIR is a `package export` folder or an unpacked package; a signature is never overwritten.

    Example: voxledger package sign ./spk_t-peft --key ./keys/oms.key
    """
    from voxledger.tasks.packaging.oms import sign_folder

    click.echo(f"wrote {sign_folder(folder, key)} (OMS v1.0, ECDSA key signature)")


COMMANDS = (package,)
