"""Floor 3, bytes over HTTP: the resumable, verified downloader and a GGUF header read over Range requests."""
