"""The Settings place: the window's settings panel (app/ui/widgets/settings_panel.py) as a page of its
own, in a readable column. The panel is one widget: the window lends it to this page while the page
is shown and gives it back to the chat's side panel when the user leaves (`hold`, `release`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.ui.base import theme
from app.ui.base.props import props


class SettingsView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("page")
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_2", "space_2", "space_1")
        layout.addWidget(props(QLabel("Settings"), objectName="title"))
        layout.addWidget(props(QLabel("Each setting says what it does; most take effect at once."),
                               objectName="subtitle", wordWrap=True))
        self.scroll_area = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.column = props(QWidget(), objectName="page")
        self.column_layout = QHBoxLayout(self.column)
        self.column_layout.setContentsMargins(0, 0, 0, 0)
        self.scroll_area.setWidget(self.column)
        layout.addWidget(self.scroll_area, 1)
        self.held: QWidget | None = None
        self._width = 0

    def hold(self, panel: QWidget) -> None:
        """Show the panel here, no wider than a column that reads well."""
        self.held, self._width = panel, panel.maximumWidth()
        panel.setMaximumWidth(theme.metric("column_max"))
        self.column_layout.addWidget(panel, 1)
        self.column_layout.addStretch(0)
        panel.show()

    def release(self) -> QWidget | None:
        """Hand the panel back (None when it is not here)."""
        panel, self.held = self.held, None
        if panel is not None:
            self.column_layout.removeWidget(panel)
            panel.setMaximumWidth(self._width)  # as wide as the side panel lets it
            while self.column_layout.count():
                self.column_layout.takeAt(0)
        return panel
