"""Stand-ins used only by tests and benchmarks: the ECS emulator, the API-server harness, CRI,
pod-resources and SMC kernel fakes. Never installed with the package."""
