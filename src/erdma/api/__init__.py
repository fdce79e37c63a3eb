"""gRPC stubs generated from proto/ by `make stubs`; never hand-edited."""
