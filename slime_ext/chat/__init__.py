"""Chat rendering and reply parsing, shared by the HTTP API, the trainer, the judge and the agent
environments: ``prompt`` renders messages (and tools) to prompt token ids with the model's chat
template; ``reply`` turns decoded text back into content and tool calls, incrementally. No HTTP
here, so nothing outside ``api/`` imports the HTTP layer to render a prompt."""
