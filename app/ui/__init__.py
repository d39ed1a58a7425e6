"""The `ui` floor: the Qt user interface, the only package that imports Qt. It holds no logic a core
test needs. Inside it, imports point down too: `base/` (ops, props, messages, theme, the engine
thread) < `widgets/` < `views/` (the places) < the window and the application here."""
