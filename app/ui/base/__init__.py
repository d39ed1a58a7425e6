"""The UI's own base: the op runner, widget props, the message bridge, the theme, the engine thread."""
