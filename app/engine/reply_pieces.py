"""The kinds of text a reply streams in: what an engine's `on_event` gets, what the reasoning and
tool-call splitters make, what a server turns into its own frames. One spelling for all of them. No Qt.
A tool call's piece comes whole, once the call is closed."""

REASONING_PIECE, ANSWER_PIECE, TOOL_CALL_PIECE = "reasoning", "answer", "tool_call"
