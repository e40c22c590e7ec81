"""Worker runtime: the task registry (App), the handler context, heartbeats and the claim loop."""
