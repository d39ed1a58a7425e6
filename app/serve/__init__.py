"""The `serve` floor: the local OpenAI-compatible server over the loaded engine."""
