"""Floor 7, chat engines: the ChatEngine protocol, the local llama.cpp engine, remote
OpenAI-compatible endpoints, chat templates, reasoning and tool-call parsing."""
