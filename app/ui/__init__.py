"""The Qt user interface: the only package that imports Qt. It holds no logic a core test needs."""
