"""Floor 1, what every floor uses: folders, logging, durable writes, HTTP, kept secrets, user settings."""
