"""Clover Launcher: run Clover-35B-A3B (and other GGUF models) locally on one NVIDIA card.

Everything in this package except `app.ui` is plain Python with no Qt import, so that the
command line (`python -m app ...`) and the tests use the same code as the window.
"""

__version__ = "0.1.0"
APP_NAME = "Clover Launcher"
APP_ID = "clover-launcher"
