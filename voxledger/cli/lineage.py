"""``voxledger lineage``: what produced a receipt or artifact, or what used it, as a tree or edges."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.tree import Tree

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_node

console = cli_console()


@click.command("lineage")
@click.argument("ref")
@click.option("--up/--down", default=True, help="Walk to what produced REF (up) or what used it (down).")
@click.option("--depth", type=click.IntRange(min=1), default=20, show_default=True, help="Hops to walk.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tree", "graph", "json"]),
    default="tree",
    show_default=True,
    help="A tree, Graphviz dot, or JSON edges.",
)
@json_option("the edges")
@click.pass_context
def lineage(ctx: click.Context, ref: str, up: bool, depth: int, fmt: str, as_json: bool) -> None:
    """Walk the provenance graph from a receipt or artifact digest (or a unique prefix).

    Example: voxledger lineage 3fa2c1d9 --up --depth 5
    """
    from voxledger.stores.lineage import walk
    from voxledger.stores.queries import receipt_labels
    from voxledger.stores.verify import check_walked_edges

    node = resolve_node(ctx, ref)
    home = open_home(ctx, existing=True)
    with home.catalog.connect(read_only=True) as con:
        edges = walk(con, node, "up" if up else "down", depth)
        labels = receipt_labels(con)
    check_walked_edges(home, [(e.src, e.dst, e.role, e.direction) for e in edges])  # the index against the receipts
    if fmt == "json" or as_json:
        emit_json([e.__dict__ for e in edges])
    elif fmt == "graph":
        click.echo("digraph lineage {")
        for e in edges:
            click.echo(f'  "{e.src[:12]}" -> "{e.dst[:12]}" [label="{e.role}"];')
        click.echo("}")
    else:
        click.echo(_render_tree(node, edges, labels, up))


def _render_tree(node: str, edges: list, labels: dict[str, str], up: bool) -> str:  # type: ignore[type-arg]
    children: dict[str, list] = {}  # type: ignore[type-arg]
    for e in edges:
        parent, child = (e.dst, e.src) if up else (e.src, e.dst)
        children.setdefault(parent, []).append((e.role, child))

    def label(n: str) -> str:
        return f"{n[:16]} {labels.get(n, 'artifact')}"

    root = Tree(escape(label(node)))
    seen = {node}

    def add(branch: Tree, n: str) -> None:
        for role, child in children.get(n, []):
            sub = branch.add(escape(f"[{role}] {label(child)}"))
            if child not in seen:
                seen.add(child)
                add(sub, child)

    add(root, node)
    with console.capture() as cap:
        console.print(root)
    return cap.get()


COMMANDS = (lineage,)
