"""Small controls that several pages share: icon buttons and compact toggles drawn from the theme
(their icons redrawn when the theme or the font scale changes), the "plan for" card-size selector
and the Run/Stop button row of a page that runs one background job at a time."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
)

from app.machine.gpu import GpuProbe
from app.ui.base import icons, theme
from app.ui.base.props import props

WHAT_IF_GB = (8, 12, 16, 24, 32, 48, 80)


class IconButton(QToolButton):
    """A button that is an icon (a Lucide name) in a theme role's colour, with a tooltip; `text`, when
    given, shows beside the icon (a toggle such as "Thinking")."""

    def __init__(self, icon: str, tip: str, role: str = "icon", size: int = 18, text: str = "",
                 object_name: str = "iconButton", checkable: bool = False) -> None:
        super().__init__()
        self.setObjectName(object_name)
        self.icon_name, self.role, self.icon_px = icon, role, size
        self.setToolTip(tip)
        self.setAccessibleName(text or tip.split(" (")[0])
        self.setCheckable(checkable)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setIconSize(QSize(size, size))
        self.worded = bool(text)  # shows its word where there is room, its icon alone where there is not
        if text:
            self.setText(text)
            self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)  # may shrink to the icon
        self._redraw()
        theme.notifier().changed.connect(self._redraw)

    def _full(self) -> QSize:
        """The size with its word beside the icon, whichever way it shows now."""
        shown = self.toolButtonStyle()
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        size = super().sizeHint()
        self.setToolButtonStyle(shown)
        return size

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return self._full() if self.worded else super().sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (the icon alone: a narrow window keeps the row)
        if not self.worded:
            return super().minimumSizeHint()
        full = self._full()
        return QSize(min(full.width(), self.icon_px + 2 * theme.metric("space_3")), full.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        if self.worded:
            room = event.size().width() >= self._full().width()
            style = Qt.ToolButtonStyle.ToolButtonTextBesideIcon if room else Qt.ToolButtonStyle.ToolButtonIconOnly
            if style != self.toolButtonStyle():
                self.setToolButtonStyle(style)
        super().resizeEvent(event)

    def set_icon(self, icon: str, role: str | None = None) -> None:
        self.icon_name, self.role = icon, role or self.role
        self._redraw()

    def _redraw(self) -> None:
        icon = QIcon(theme.icon(self.icon_name, self.role, self.icon_px))  # a copy: the theme caches its icons
        if self.objectName() == "toggle":  # on: the accent's text colour, as the pill's label
            for ratio in (1.0, 2.0):
                icon.addPixmap(icons.pixmap(self.icon_name, theme.color("toggle_on_text"), self.icon_px, ratio),
                               QIcon.Mode.Normal, QIcon.State.On)
        self.setIcon(icon)


def toggle(icon: str, text: str, tip: str) -> IconButton:
    """A compact on/off switch with an icon and a word ("Thinking"), drawn as a pill (app.qss #toggle)."""
    return IconButton(icon, tip, role="toggle_off_text", size=14, text=text, object_name="toggle", checkable=True)


def what_if_choices(gpus: GpuProbe) -> list[tuple[str, float | None]]:
    """(label, GiB or None for this machine) for the 'plan for' selector."""
    here = gpus.gpus[0].name if gpus.has_gpu else "no GPU: CPU only"
    return [(f"This machine ({here})", None)] + [(f"a {gb} GB card", float(gb)) for gb in WHAT_IF_GB]


def what_if_row(gpus: GpuProbe, changed: Callable[[], None]) -> tuple[QHBoxLayout, QComboBox]:
    """"Plan for [this machine | a 16 GB card | …]": the row and its selector (data: GiB or None)."""
    row = QHBoxLayout()
    row.addWidget(QLabel("Plan for"))
    combo = QComboBox()
    for label, gb in what_if_choices(gpus):
        combo.addItem(label, gb)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(12)
    combo.currentIndexChanged.connect(lambda _i: changed())
    row.addWidget(combo, 1)
    return row, combo


def run_stop_row(run_text: str, run: Callable[[], None], stop: Callable[[], None],
                 ) -> tuple[QHBoxLayout, QPushButton, QPushButton]:
    """[Run] [Stop] at the left of a row; Stop starts disabled (the page enables it while its job runs)."""
    row = QHBoxLayout()
    run_button = props(QPushButton(run_text), objectName="primary")
    run_button.clicked.connect(lambda: run())
    stop_button = QPushButton("Stop")
    stop_button.setEnabled(False)
    stop_button.clicked.connect(lambda: stop())
    row.addWidget(run_button)
    row.addWidget(stop_button)
    return row, run_button, stop_button


class ConfirmBox(QFrame):
    """An inline question before something costly ("This file does not fit… [Download anyway] [Cancel]"):
    hidden until `ask()`, hidden again by Cancel; `proceed` runs on the confirm button."""

    def __init__(self, confirm_text: str, proceed: Callable[[], None]) -> None:
        super().__init__()
        self.setObjectName("card")
        layout = QVBoxLayout(self)
        self.text = props(QLabel(), objectName="warning", wordWrap=True)
        layout.addWidget(self.text)
        row = QHBoxLayout()
        self.confirm_button = QPushButton(confirm_text)
        self.confirm_button.clicked.connect(lambda: proceed())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self.setVisible(False))
        row.addWidget(self.confirm_button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        layout.addLayout(row)
        self.setVisible(False)

    def ask(self, why: str, can_proceed: bool = True) -> None:
        self.text.setText(why)
        self.confirm_button.setVisible(can_proceed)
        self.setVisible(True)
