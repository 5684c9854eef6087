"""The template's REST API on the embedded stack, answered as API Gateway answers it."""
