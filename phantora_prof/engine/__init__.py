"""The coordinator side: simulated GPUs (streams, events, syncs) and the trace assembly.

Never imports torch or runtime code; it only sees `phantora_prof.protocol` messages.
"""
