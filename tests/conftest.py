"""Suite-wide setup: gRPC's asyncio layer is initialised once, from the main thread.

Many tests run gRPC aio servers and channels, each on its own event loop. gRPC shuts its aio
layer (the poller thread of its global completion queue) down whenever the last aio object is
collected, and starts it again with the next; a collection that lands in the middle of another
test can then join a poller thread that waits for a loop that is gone, and the run hangs
(grpc/grpc#22365, #22758). One reference held for the whole session keeps the layer up.
"""

from __future__ import annotations

from grpc.experimental.aio import init_grpc_aio

init_grpc_aio()
