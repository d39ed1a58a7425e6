"""props(): Qt properties by name, as PySide6's constructor keywords, but typed."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDoubleSpinBox, QPushButton

from app.ui.base.props import props


def test_properties_in_order_and_signals_connected(qtbot):
    clicks = []
    button = props(QPushButton("Go"), objectName="primary", toolTip="Start", clicked=lambda: clicks.append(1))
    qtbot.addWidget(button)
    button.click()
    assert (button.objectName(), button.toolTip(), clicks) == ("primary", "Start", [1])
    spin = props(QDoubleSpinBox(), minimum=15, maximum=1800, value=120, decimals=0)
    assert spin.value() == 120  # the maximum was set before the value


def test_a_misspelt_property_fails_loudly(qtbot):
    with pytest.raises(AttributeError):
        props(QPushButton(), objectNmae="x")
