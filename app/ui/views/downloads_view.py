"""The Downloads place: every download and set-up of the app (app/fetch/downloads.py) in one list,
whichever page started it, each with its stage, bytes, speed, time left, Pause / Resume / Cancel and
its failure as a sentence with what to do. The rail's Downloads button shows their progress.

The registry knows no Qt: `DownloadsBridge` runs its jobs as Ops (the one long-job mechanism) and
turns its changes, heard on a job's thread, into a queued signal. `ResumeBanner` offers, at start,
the downloads the last run left unfinished; `ask_before_closing` asks before the window cuts one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.base.paths import app_dirs
from app.fetch.downloads import Downloads, Job, describe, size_words
from app.ui.base import theme
from app.ui.base.ops import Op, OpContext
from app.ui.base.props import props
from app.ui.widgets.details_label import DetailsLabel
from app.ui.widgets.elided_label import ElidedLabel

BAR_STEPS = 1000
# (action, Lucide icon, tooltip, the states it shows in)
ACTIONS = (("pause", "pause", "Pause: keeps what arrived; Resume continues from there", ("running",)),
           ("resume", "play", "Resume from where it stopped", ("paused",)),
           ("retry", "rotate-ccw", "Retry from where it stopped", ("failed",)),
           ("cancel", "x", "Cancel and delete the partial download", ("running", "paused", "failed")),
           ("remove", "trash-2", "Remove from the list", ("done", "cancelled")))


class DownloadsBridge(QObject):
    """The registry, for the window: its jobs run as Ops, its changes arrive as `changed(job id)` on
    the GUI thread (emitted on a job's thread, queued to this object)."""

    changed = Signal(str)

    def __init__(self, downloads: Downloads, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.downloads = downloads
        downloads.spawn = self._spawn
        downloads.listeners.append(self._heard)
        self.restored = downloads.unfinished()  # what the last run left: offered by the resume banner

    @classmethod
    def for_app(cls, parent: QObject | None = None) -> DownloadsBridge:
        return cls(Downloads(app_dirs().data / "downloads.json"), parent)

    def _heard(self, job: Job) -> None:
        try:
            self.changed.emit(job.id)
        except RuntimeError:  # the window is gone; the job ends with the process
            pass

    def _spawn(self, job: Job, _run: Callable[[Job], Any]) -> None:
        # the window closing cancels every Op: for a download that is a pause (the .part is kept)
        def work(ctx: OpContext) -> Job:
            return self.downloads.run(job, interrupted=ctx.is_cancelled)

        Op(self, work, name=f"Download of {job.name}").run()


class JobRow(QFrame):
    """One job: its name and buttons, what it does now with the bytes, speed and time left, a bar, and
    a failure's sentence (the technical words behind "Details") or a stop's note."""

    def __init__(self, bridge: DownloadsBridge, job: Job) -> None:
        super().__init__()
        self.setObjectName("card")
        self.bridge, self.job_id = bridge, job.id
        grid = QGridLayout(self)
        theme.pad(grid, "space_3", "space_2", "space_1")
        self.name = ElidedLabel(job.name, "cardTitle", Qt.TextElideMode.ElideMiddle)
        grid.addWidget(self.name, 0, 0)
        buttons = QHBoxLayout()
        buttons.setSpacing(theme.metric("space_1"))
        self.buttons: dict[str, QToolButton] = {}
        for action, _icon, tip, _states in ACTIONS:
            button = props(QToolButton(), objectName="iconButton", toolTip=tip, autoRaise=True)
            button.setAccessibleName(tip.split(":")[0])
            button.clicked.connect(lambda _c=False, a=action: self.act(a))
            buttons.addWidget(button)
            self.buttons[action] = button
        grid.addLayout(buttons, 0, 1, 2, 1, Qt.AlignmentFlag.AlignTop)
        self.line = ElidedLabel("", "fact", Qt.TextElideMode.ElideRight)
        grid.addWidget(self.line, 1, 0)
        self.bar = props(QProgressBar(), objectName="jobBar", textVisible=False)
        self.bar.setRange(0, BAR_STEPS)
        grid.addWidget(self.bar, 2, 0, 1, 2)
        self.message = DetailsLabel("fact")
        grid.addWidget(self.message, 3, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)
        self.show_job(job)

    def _restyle(self) -> None:
        size = theme.metric("icon_md")
        for action, icon, _tip, _states in ACTIONS:
            self.buttons[action].setIcon(theme.icon(icon, "icon", size))
        palette = self.message.palette()  # "Details" in the banner's own colour: legible in both themes
        palette.setColor(QPalette.ColorRole.Link, QColor(theme.color("error")))
        self.message.setPalette(palette)

    def act(self, action: str) -> None:
        d = self.bridge.downloads
        {"pause": d.pause, "resume": d.resume, "retry": d.resume, "cancel": d.cancel, "remove": d.remove}[action](
            self.job_id)

    def show_job(self, job: Job) -> None:
        self.name.setText(job.name)
        self.line.setText(describe(job))
        for action, _icon, _tip, states in ACTIONS:
            self.buttons[action].setVisible(job.state in states)
        fraction = job.fraction if job.stage == "download" or job.state != "running" else \
            job.steps.get(job.stage, (None, ""))[0]
        if job.state == "done":
            fraction = 1.0
        if fraction is None and job.state == "running":
            self.bar.setRange(0, 0)  # busy: a stage with no measure of its own
        else:
            self.bar.setRange(0, BAR_STEPS)
            self.bar.setValue(int((fraction or 0.0) * BAR_STEPS))
        self.bar.setVisible(job.state == "running" or job.state in ("paused", "failed") and job.done > 0)
        self.message.setObjectName("errorBanner" if job.state == "failed" else "fact")
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
        if job.state == "failed":
            self.message.show_message(job.error, job.details)
        else:
            self.message.setText(job.note)
        self.message.setVisible(bool(job.error if job.state == "failed" else job.note))


class DownloadsView(QWidget):
    """The list, newest first, with a line for an empty list and Clear finished."""

    summary_changed = Signal(int, float, str)  # running jobs, their fraction (-1: unknown), a tooltip

    def __init__(self, bridge: DownloadsBridge) -> None:
        super().__init__()
        self.setObjectName("page")
        self.bridge = bridge
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_2", "space_2", "space_2")
        head = QHBoxLayout()
        head.addWidget(props(QLabel("Downloads"), objectName="title"), 1)
        self.clear_button = props(QPushButton("Clear finished"), toolTip="Remove the done and cancelled ones")
        self.clear_button.clicked.connect(self.clear_finished)
        head.addWidget(self.clear_button)
        layout.addLayout(head)
        intro = props(QLabel("Every download and set-up, whichever page started it. A paused or stopped one "
                             "continues where it stopped, also after a restart."), objectName="subtitle")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.empty = props(QLabel("Nothing is downloading. Models → Discover finds a model to set up; its "
                                  "download shows here."), objectName="fact")
        self.empty.setWordWrap(True)
        layout.addWidget(self.empty)
        self.list = QVBoxLayout()
        self.list.setSpacing(theme.metric("space_2"))
        layout.addLayout(self.list)
        layout.addStretch(1)
        self.rows: dict[str, JobRow] = {}
        bridge.changed.connect(self._on_changed)
        for job in bridge.downloads.jobs.values():
            self._on_changed(job.id)
        self._refresh()

    def _on_changed(self, job_id: str) -> None:
        job = self.bridge.downloads.get(job_id)
        row = self.rows.get(job_id)
        if job is None:
            if row is not None:
                self.list.removeWidget(row)
                row.hide()  # gone now, not only when the event loop gets to the deletion
                row.deleteLater()
                del self.rows[job_id]
        elif row is None:
            row = self.rows[job_id] = JobRow(self.bridge, job)
            self.list.insertWidget(0, row)
        else:
            row.show_job(job)
        self._refresh()

    def _refresh(self) -> None:
        jobs = self.bridge.downloads.jobs
        self.empty.setVisible(not jobs)
        self.clear_button.setEnabled(any(j.state in ("done", "cancelled") for j in jobs.values()))
        running = self.bridge.downloads.running()
        done, total = self.bridge.downloads.overall()
        fraction = done / total if total else -1.0
        tip = "; ".join(f"{j.name}: {describe(j)}" for j in running) or "Downloads and set-ups"
        self.summary_changed.emit(len(running), fraction, tip)

    def clear_finished(self) -> None:
        for job in list(self.bridge.downloads.jobs.values()):
            if job.state in ("done", "cancelled"):
                self.bridge.downloads.remove(job.id)


class ResumeBanner(QFrame):
    """One line under the message banner at start: the downloads the last run did not finish, with
    Resume (all of them) and Not now (they stay in the list, paused)."""

    def __init__(self, bridge: DownloadsBridge) -> None:
        super().__init__()
        self.setObjectName("resumeBanner")
        self.bridge = bridge
        row = QHBoxLayout(self)
        theme.pad(row, "space_3", "space_1", "space_2")
        self.text = ElidedLabel("", "fact", Qt.TextElideMode.ElideRight)
        row.addWidget(self.text, 1)
        self.resume_button = props(QPushButton("Resume"), objectName="primary")
        self.resume_button.clicked.connect(self.resume)
        self.later_button = QPushButton("Not now")
        self.later_button.clicked.connect(lambda: self.setVisible(False))
        row.addWidget(self.resume_button)
        row.addWidget(self.later_button)
        self.jobs: list[Job] = []
        self.offer(bridge.restored)

    def offer(self, jobs: list[Job]) -> None:
        """Say which downloads did not finish (the first by name, with its bytes), or hide for none."""
        self.jobs = list(jobs)
        if self.jobs:
            first = self.jobs[0]
            have = f" ({size_words(first.done)} of {size_words(first.total)})" if first.total else ""
            more = f" and {len(self.jobs) - 1} more" if len(self.jobs) > 1 else ""
            self.text.setText(f"Not finished when the app closed: {first.name}{have}{more}. Resume from where "
                              "it stopped?")
        self.setVisible(bool(self.jobs))

    def resume(self) -> None:
        for job in self.jobs:
            self.bridge.downloads.resume(job.id)
        self.setVisible(False)


def ask_before_closing(parent: QWidget, downloads: Downloads) -> bool:
    """Whether the window may close: yes when nothing downloads; else the user chooses between Keep
    downloading (the window stays) and Stop and quit (paused, their .part kept for the next start)."""
    jobs = downloads.running()
    if not jobs:
        return True
    names = ", ".join(j.name for j in jobs[:2]) + (f" and {len(jobs) - 2} more" if len(jobs) > 2 else "")
    box = QMessageBox(QMessageBox.Icon.Question, "Downloads are running",
                      f"{names} {'is' if len(jobs) == 1 else 'are'} still downloading. Stop and quit? The next "
                      "start offers to resume from where it stopped.", parent=parent)
    box.setObjectName("closeWhileDownloading")
    keep = box.addButton("Keep downloading", QMessageBox.ButtonRole.RejectRole)
    stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(keep)
    box.exec()
    if box.clickedButton() is not stop:
        return False
    downloads.pause_all(wait=3.0)
    return True
