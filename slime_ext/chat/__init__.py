"""Chat rendering and reply parsing, shared by the HTTP API, the trainer, the judge and the agent
environments: ``prompt`` renders messages (and tools) to prompt token ids with the model's chat
template; ``reply`` turns decoded text back into content and tool calls, incrementally; ``memory``
adds a user's standing preferences to a request, and says which ones a new message replaces or takes back. No HTTP
here, so nothing outside ``api/`` imports the HTTP layer to render a prompt."""
