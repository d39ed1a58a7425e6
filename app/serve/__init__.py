"""Floor 9, the local OpenAI-compatible server over the loaded engine."""
