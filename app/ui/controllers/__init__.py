"""Qt controllers: the window's state and jobs (the model, the chat, conversations, the local
server, GPU memory), with signals, and no widgets of their own."""
