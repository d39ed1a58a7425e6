"""The `base` floor: what every floor uses: folders, logging, durable writes, HTTP, kept secrets, user settings."""
