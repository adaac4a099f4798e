"""Built-in scenarios of the simulated fleet (``--simulate NAME``); the format is in docs/scenarios.md."""
