"""Command-line tools for people: devices, docker, cdi, doctor, smc, sim."""
