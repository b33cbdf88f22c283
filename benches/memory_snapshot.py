#!/usr/bin/env python3
"""A recorded torch workload through gpuport's torch hook, for the memory viewers.

    python benches/memory_snapshot.py OUT_DIR

Makes gpuport PyTorch's allocator, records gpuport's allocation history
while four ``Linear`` layers run forward and backward at sequence lengths
256 to 2048 (a side stream fills a scratch tensor each step), and writes
``OUT_DIR/snap.pickle`` with ``gpuport.memory.dump_snapshot``. The file then
goes through PyTorch's own viewer code (``torch.cuda._memory_viz``:
``segsum``, ``trace_plot`` and ``segment_plot``, written as HTML beside it)
and can be drawn with ``gpuport memory plot OUT_DIR/snap.pickle -o
plot.png``. Needs torch with a CUDA GPU.
"""

import pickle
import sys
from pathlib import Path


def main(out: Path) -> None:
    import torch

    import gpuport.memory as gm
    import gpuport.torch

    gpuport.torch.use_gpuport_for_torch()
    gm.record_memory_history(max_entries=100_000)
    side = torch.cuda.Stream()
    model = [torch.nn.Linear(1024, 1024).cuda() for _ in range(4)]
    for seq in [256, 512, 1024, 2048, 1024, 512]:
        x = torch.randn(seq, 1024, device="cuda", requires_grad=True)
        h = x
        for layer in model:
            h = torch.relu(layer(h))
        h.sum().backward()
        with torch.cuda.stream(side):
            scratch = torch.empty(seq * 4096, device="cuda")
            scratch.fill_(1.0)
        torch.cuda.synchronize()
        del x, h, scratch
    gm.record_memory_history(None)
    out.mkdir(parents=True, exist_ok=True)
    gm.dump_snapshot(out / "snap.pickle", backend="cuda")

    from torch.cuda import _memory_viz

    with open(out / "snap.pickle", "rb") as f:
        data = pickle.load(f)
    entries = sum(len(t) for t in data["device_traces"])
    print(f"trace entries {entries}, segments {len(data['segments'])}")
    print(_memory_viz.segsum(data)[:600])
    (out / "trace.html").write_text(_memory_viz.trace_plot(data))
    (out / "segments.html").write_text(_memory_viz.segment_plot(data))
    print(f"viewer pages: {out / 'trace.html'}, {out / 'segments.html'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
