"""Helpers for the LLM judge's tests: canned chat-completion replies and a llama.cpp server."""
