#!/usr/bin/env python3
"""Two network namespaces joined by a veth pair, for ci/gpu-two-nodes on machines without `ip`.

    python3 ci/netns.py up     # gpn0 (vg0, 10.77.0.1/24) <-> gpn1 (vg1, 10.77.0.2/24), loopback up in both
    python3 ci/netns.py down   # removes both namespaces (and with them the pair)

What `ip netns add` and `ip link add ... type veth` do, through pyroute2's
netlink calls (the namespaces are bound under /var/run/netns, as `ip`
binds them, so `nsenter --net=/var/run/netns/gpn0` enters one). Needs root
with CAP_NET_ADMIN and CAP_SYS_ADMIN. Exits 1, saying why, where it cannot.
"""

import sys

NODES = (("gpn0", "vg0", "10.77.0.1"), ("gpn1", "vg1", "10.77.0.2"))


def up() -> None:
    from pyroute2 import IPRoute, NetNS, netns

    for ns, _, _ in NODES:
        netns.create(ns)
    with IPRoute() as ip:
        ip.link("add", ifname=NODES[0][1], kind="veth", peer=NODES[1][1])
        for ns, ifname, _ in NODES:
            ip.link("set", index=ip.link_lookup(ifname=ifname)[0], net_ns_fd=ns)
    for ns, ifname, addr in NODES:
        with NetNS(ns) as n:
            index = n.link_lookup(ifname=ifname)[0]
            n.addr("add", index=index, address=addr, prefixlen=24)
            n.link("set", index=index, state="up")
            n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")
    print("netns.py: gpn0 and gpn1 joined by vg0/vg1")


def down() -> None:
    from pyroute2 import netns

    for ns, _, _ in NODES:
        if ns in netns.listnetns():
            netns.remove(ns)


if __name__ == "__main__":
    command = {"up": up, "down": down}.get(sys.argv[1] if len(sys.argv) == 2 else "")
    if command is None:
        sys.exit(__doc__)
    try:
        command()
    except Exception as e:  # noqa: BLE001 - the reason is the output
        print(f"netns.py {sys.argv[1]}: {type(e).__name__}: {e}", file=sys.stderr)
        if command is up and not isinstance(e, ImportError):
            down()  # what was made before the failure
        sys.exit(1)
