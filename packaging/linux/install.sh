#!/usr/bin/env bash
# Install a built bundle for this user: copy it to ~/.local/opt, add the menu entry and icons.
#   bash packaging/linux/install.sh [BUNDLE_DIR]     (default: dist/clover-launcher)
# Undo with packaging/linux/uninstall.sh. Models and conversations are not touched by either.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bundle="${1:-$root/dist/clover-launcher}"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
dest="$HOME/.local/opt/clover-launcher"
[ -x "$bundle/clover-launcher" ] || { echo "no bundle at $bundle (build it: packaging/build_bundle.py)" >&2; exit 2; }
mkdir -p "$HOME/.local/opt" "$data/applications" "$HOME/.local/bin"
rm -rf "$dest.new" && cp -a "$bundle" "$dest.new" && rm -rf "$dest" && mv "$dest.new" "$dest"
for size in 16 24 32 48 64 128 256 512; do
    mkdir -p "$data/icons/hicolor/${size}x${size}/apps"
    cp "$root/resources/icons/clover-$size.png" "$data/icons/hicolor/${size}x${size}/apps/clover-launcher.png"
done
mkdir -p "$data/icons/hicolor/scalable/apps"
cp "$root/resources/icons/clover.svg" "$data/icons/hicolor/scalable/apps/clover-launcher.svg"
sed "s|@EXEC@|$dest/clover-launcher|" "$here/clover-launcher.desktop.in" > "$data/applications/clover-launcher.desktop"
ln -sf "$dest/clover-launcher" "$HOME/.local/bin/clover-launcher"
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q "$data/icons/hicolor" || true
echo "installed: $dest (menu entry: Clover Launcher; command: clover-launcher)"
