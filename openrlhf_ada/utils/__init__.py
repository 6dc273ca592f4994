"""Small helpers shared by tests and demos (e.g. a tiny random Llama checkpoint built offline)."""
