"""The `gguf` floor: reading model files: the GGUF header and tensor table, and the facts a plan needs from them."""
