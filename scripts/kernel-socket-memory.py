#!/usr/bin/env python3
"""The kernel's memory per idle TCP socket, as docs/deploy.md reports it.

Opens N loopback connections (2N sockets), exchanges a small message each way
on each (as a WebSocket upgrade and a hello would), registers every socket
with epoll (as tokio and nginx do), and prints how much the kernel's slab
caches grew per socket, and whether TCP buffer memory moved at all.

    sudo python3 scripts/kernel-socket-memory.py 9000

Needs root (to read /proc/slabinfo) and a descriptor limit above 2N + 100.
Slab growth counts whole slabs, so it runs a little above the objects' sizes.
"""

import select
import socket
import sys


def slab_bytes():
    sizes = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            name, _active, total, size = line.split()[:4]
            sizes[name] = int(total) * int(size)
    return sizes


def tcp_buffer_pages():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1])
    return 0


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    before, pages_before = slab_bytes(), tcp_buffer_pages()
    poller = select.epoll()
    held = []
    for _ in range(n):
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        client.sendall(b"x" * 300)
        server.recv(1024)
        server.sendall(b"y" * 200)
        client.recv(1024)
        poller.register(server.fileno(), select.EPOLLIN)
        poller.register(client.fileno(), select.EPOLLIN)
        held.append((client, server))
    after, pages_after = slab_bytes(), tcp_buffer_pages()
    sockets = 2 * n
    growth = {k: after[k] - before.get(k, 0) for k in after}
    total = sum(v for v in growth.values() if v > 0)
    print(f"{sockets} idle sockets: {total / sockets:.0f} bytes of kernel slab each")
    print(f"TCP buffer memory: {pages_before} -> {pages_after} pages")
    for name, grew in sorted(growth.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {name:24s} {grew / sockets:7.0f}")


if __name__ == "__main__":
    main()
