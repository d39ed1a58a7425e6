"""The `net` floor: bytes over HTTP: the resumable, verified downloader and a GGUF header read over Range requests."""
