"""The top-level README's table of Python errors ("Python" section): each
row's class exists, is a FluxError of that status, and is also the builtin
the row names; and the statuses are reachable as the README says
(``flux.Status.ERR_*``, C name in ``.status_name``)."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import pytest

import flux

README = Path(__file__).resolve().parents[3] / "README.md"

pytestmark = pytest.mark.skipif(not README.exists(), reason="not run from a libflux checkout")


def error_rows() -> list[tuple[str, str, str]]:
    text = README.read_text()
    start = text.index("Errors are `flux.FluxError`")
    rows = []
    for line in text[start:].splitlines()[1:]:
        match = re.match(r"\| `(\w+Error)` \| `(FLUX_\w+)`[^|]*\| (?:`(\w+)`)? *\|$", line)
        if match:
            rows.append((match.group(1), match.group(2), match.group(3) or ""))
        elif rows and not line.startswith("|"):
            break
    return rows


def test_table_is_found() -> None:
    assert len(error_rows()) == 8


@pytest.mark.parametrize(("name", "c_name", "also"), error_rows())
def test_row(name: str, c_name: str, also: str) -> None:
    cls = getattr(flux, name)
    error = cls()
    assert isinstance(error, flux.FluxError)
    assert error.status_name == c_name
    # The README: `.status` is a flux.Status such as flux.Status.ERR_CIRCULAR.
    assert isinstance(error.status, flux.Status)
    assert error.status is getattr(flux.Status, c_name.removeprefix("FLUX_"))
    if also:
        assert isinstance(error, getattr(builtins, also))


def test_prose_example() -> None:
    text = README.read_text()
    assert "`flux.Status.ERR_CIRCULAR`" in text
    assert flux.CircularDependencyError().status is flux.Status.ERR_CIRCULAR
    assert flux.CircularDependencyError().status_name == "FLUX_ERR_CIRCULAR"
