#!/usr/bin/env python3
"""Measure a link's effective TCP rate: one receiver, one sender, a bulk transfer.

    link_rate.py serve HOST PORT            # on the receiving host: one transfer, then exit
    link_rate.py send HOST PORT [SECONDS]   # on the sending host: prints the rate, bit/s

The receiver times the bytes from the first to the last one received and sends
the result back; the sender prints it as JSON ({"bits_per_s": ..., "bytes": ...}).
Standard library only: it runs under the system Python inside a network namespace.
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 1 << 20


def serve(host: str, port: int) -> None:
    with socket.create_server((host, port)) as server:
        connection, _ = server.accept()
        with connection:
            received, first, last = 0, None, None
            while True:
                data = connection.recv(CHUNK)
                if not data:
                    break
                now = time.perf_counter()
                first = now if first is None else first
                last, received = now, received + len(data)
            elapsed = (last - first) if first is not None and last > first else float("nan")
            result = {"bits_per_s": received * 8 / elapsed, "bytes": received, "seconds": elapsed}
            connection.sendall(json.dumps(result).encode())


def send(host: str, port: int, seconds: float) -> None:
    payload = b"\0" * CHUNK
    deadline = time.monotonic() + 5
    while True:  # the receiver may still be starting
        try:
            connection = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with connection:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(60)
        reply = b"".join(iter(lambda: connection.recv(4096), b""))
    print(reply.decode(), flush=True)


if __name__ == "__main__":
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "serve":
        serve(host, port)
    else:
        send(host, port, float(sys.argv[4]) if len(sys.argv) > 4 else 2.0)
