"""Starts one process per device: ``python -m gpuport.distributed.run -n 2
script.py [args...]``. Each gets ``GPUPORT_RANK``, ``GPUPORT_WORLD_SIZE``,
``GPUPORT_LOCAL_RANK`` (and torchrun's ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``) and the store's ``GPUPORT_MASTER_ADDR``/``PORT``; the rest
of the environment (``NCCL_*`` included) is inherited. If one process
fails, the others are stopped; the exit status is the first failure's.

For several machines, start this on each with ``--nnodes``, ``--node-rank``
and ``--master-addr`` (rank 0's machine, reachable from all) and the same
``--master-port``; NCCL then uses its own network transport.

>>> from gpuport.distributed import run
>>> run.parse(["-n", "2", "train.py", "--lr", "0.1"]).nproc
2
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

__all__ = ["free_port", "main", "parse"]


def parse(argv: list[str]) -> argparse.Namespace:
    """The launcher's arguments.

    >>> from gpuport.distributed import run
    >>> run.parse(["-n", "2", "x.py"]).script
    'x.py'
    """
    p = argparse.ArgumentParser(prog="python -m gpuport.distributed.run")
    p.add_argument("-n", "--nproc", type=int, default=1, help="processes on this machine (one per device)")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=0, help="0: a free port (one machine only)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def free_port() -> int:
    """A free TCP port on this machine.

    >>> from gpuport.distributed import run
    >>> run.free_port() > 0
    True
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    """Runs the job and returns its exit status.

    >>> from gpuport.distributed import run
    >>> import tempfile, pathlib
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "r.py"
    >>> _ = script.write_text("import os; assert os.environ['GPUPORT_WORLD_SIZE'] == '2'")
    >>> run.main(["-n", "2", str(script)])
    0
    """
    a = parse(sys.argv[1:] if argv is None else argv)
    if a.nproc < 1 or a.nnodes < 1:
        raise SystemExit("-n and --nnodes must be at least 1")
    port = a.master_port or (free_port() if a.nnodes == 1 else 0)
    if not port:
        raise SystemExit("--master-port is needed with --nnodes > 1 (the same on every machine)")
    world = a.nproc * a.nnodes
    procs = []
    for local in range(a.nproc):
        rank = a.node_rank * a.nproc + local
        env = dict(os.environ)
        env.update(
            GPUPORT_RANK=str(rank),
            GPUPORT_WORLD_SIZE=str(world),
            GPUPORT_LOCAL_RANK=str(local),
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(local),
            GPUPORT_MASTER_ADDR=a.master_addr,
            GPUPORT_MASTER_PORT=str(port),
            # Jobs this launcher starts never use NVLink multicast (NVLS).
            NCCL_NVLS_ENABLE="0",
        )
        procs.append(subprocess.Popen([sys.executable, a.script, *a.args], env=env))
    status = 0
    while procs:
        for p in list(procs):
            code = p.poll()
            if code is None:
                continue
            procs.remove(p)
            if code != 0 and status == 0:
                status = code
                for other in procs:
                    other.terminate()
        time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main())
