"""Widgets the window is made of: the chat transcript, composer, sidebar, model bar and panels."""
