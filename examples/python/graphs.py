"""Record work on a stream once, replay it many times.

    python examples/python/graphs.py            # GPUPORT_DEVICE=host forces the host

`with g.capture(stream):` records the runtime calls enqueued on the stream
(kernels, copies, memsets); `g.replay()` runs them all again with one call.
Calls that would wait for the capturing stream are refused with a
GraphError, and the capture survives them.
"""
import ctypes

import gpuport
from gpuport import runtime as rt

dev = gpuport.default_device()
print(f"gpuport on {dev}")
n = 256
buf = rt.malloc(4 * n, device=dev)
fill = rt.module_get_function(rt.module_load(device=dev), "gpuport_fill_u32")
stream = gpuport.Stream(dev)

g = gpuport.Graph()
with g.capture(stream, mode="thread_local"):
    rt.launch_kernel(fill, 1, n, [buf, ctypes.c_uint64(n), ctypes.c_uint32(7)], stream=stream)
    try:
        stream.synchronize()  # would wait for work that has not run: refused
    except gpuport.GraphError as e:
        print(f"refused inside the capture ({e.kind})")
print(f"captured {g.node_count} operation(s)")

rt.memset(buf, 0, 4 * n)
for _ in range(3):
    g.replay(stream)  # each replay runs the recording again
stream.synchronize()
out = (ctypes.c_uint32 * n)()
rt.memcpy(out, buf, 4 * n)
assert all(v == 7 for v in out), list(out)[:8]
print("graphs ok")
