"""The pages beside the chat: set-up, the Hub browser, engines, the scenario bench and tune."""
