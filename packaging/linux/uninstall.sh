#!/usr/bin/env bash
# Remove what install.sh added. Models, conversations and settings stay (see the README for where).
set -euo pipefail
data="${XDG_DATA_HOME:-$HOME/.local/share}"
rm -rf "$HOME/.local/opt/clover-launcher"
rm -f "$data/applications/clover-launcher.desktop" "$HOME/.local/bin/clover-launcher"
rm -f "$data"/icons/hicolor/*/apps/clover-launcher.png "$data/icons/hicolor/scalable/apps/clover-launcher.svg"
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
echo "uninstalled Clover Launcher (your models and conversations were left in place)"
