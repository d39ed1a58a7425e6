"""The `chat` floor: conversations: the Qt-free chat session (history, tool rounds, demo tools), the store
and Markdown to HTML."""
