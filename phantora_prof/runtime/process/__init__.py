"""The rank process: its entry point, set-up, state, clock, link to the coordinator, native device."""
