"""The evaluation journal survives a torn write: later rows are never lost behind it."""

from __future__ import annotations

from pathlib import Path

from voxledger.tasks.evaluation.journal import Journal, cut_torn_tail


def test_rows_after_a_torn_line_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "generations.jsonl"
    first = Journal(path)
    first.append({"id": 1})
    first.append({"id": 2})
    with open(path, "ab") as f:  # a crash in the middle of writing row 3
        f.write(b'{"id":3,"au')
    resumed = Journal(path)  # the next process
    resumed.append({"id": 3})
    resumed.append({"id": 4})
    assert [r["id"] for r in Journal(path).rows()] == [1, 2, 3, 4]
    assert path.read_bytes().count(b"\n") == 4 and b'"au' not in path.read_bytes()


def test_a_damaged_line_in_the_middle_skips_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"id":1}\n{"id":2{"id":9}\n{"id":3}\n')  # written by a version that appended after a torn line
    assert [r["id"] for r in Journal(path).rows()] == [1, 3]


def test_cut_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    assert cut_torn_tail(path) == 0  # no file
    path.write_bytes(b"a\nb\nccc")
    assert cut_torn_tail(path) == 3 and path.read_bytes() == b"a\nb\n"
    assert cut_torn_tail(path) == 0
    path.write_bytes(b"x" * 200_000)  # no newline at all: nothing complete to keep
    assert cut_torn_tail(path) == 200_000 and path.read_bytes() == b""
