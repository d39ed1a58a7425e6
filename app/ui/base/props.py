"""Qt properties set by name on an object just made: `props(QLabel("Hi"), objectName="title")`.

PySide6 takes Qt properties as constructor keywords, but its type stubs do not declare them, so a
type checker cannot follow such calls. This keeps the one-expression style, stays typed, and fails
loudly on a misspelt property (each name must have its setter: objectName → setObjectName)."""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtCore import QObject, SignalInstance

W = TypeVar("W", bound=QObject)


def props(obj: W, **values: object) -> W:
    """Set each property through its setter; a signal's name connects the value to it, as PySide6's
    constructors do."""
    for name, value in values.items():
        signal = getattr(obj, name, None)
        if isinstance(signal, SignalInstance):
            signal.connect(value)
        else:
            getattr(obj, "set" + name[0].upper() + name[1:])(value)
    return obj
