"""One way to turn a pydantic ValidationError into message lines."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from voxledger.schemas.errors import error_path, validation_lines


class Point(BaseModel):
    x: int
    tags: list[int] = []


def _error(doc: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Point.model_validate(doc)
    return info.value


def test_lines_name_the_path_and_the_message() -> None:
    exc = _error({"x": "a", "tags": [1, "b", "c"]})
    assert validation_lines(exc) == [
        "x: Input should be a valid integer, unable to parse string as an integer",
        "tags.1: Input should be a valid integer, unable to parse string as an integer",
        "tags.2: Input should be a valid integer, unable to parse string as an integer",
    ]
    assert (
        validation_lines(exc, sep="/", show_input=True)[1]
        == "tags/1: Input should be a valid integer, unable to parse string as an integer (got 'b')"
    )
    assert validation_lines(exc, limit=1)[1:] == ["... and 2 more"]


def test_the_whole_document_has_a_name() -> None:
    exc = _error([1, 2])
    assert validation_lines(exc) == ["<top>: Input should be a valid dictionary or instance of Point"]
    assert error_path(exc.errors()[0], root="<root>") == "<root>"
