"""Torch-free trace tools: the event model, the Kineto JSON writer/reader and the validator."""
