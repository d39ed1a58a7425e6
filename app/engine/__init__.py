"""The `engine` floor: chat engines: the engine contract (app/engine/contract.py), the local llama.cpp engine, remote
OpenAI-compatible endpoints, chat templates, reasoning and tool-call parsing."""
