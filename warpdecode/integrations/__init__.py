"""Adapters that plug warpdecode into other frameworks. Each is opt-in: nothing registers on import."""
