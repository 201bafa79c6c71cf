"""Every public name of ``flux`` has a docstring: each name in
``flux.__all__``, and each public method and property of its classes."""

from __future__ import annotations

import inspect

import flux


def undocumented() -> list[str]:
    missing = []
    for name in flux.__all__:
        obj = getattr(flux, name)
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if callable(value) and not (getattr(value, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    assert undocumented() == []
