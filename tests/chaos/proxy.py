"""A local TCP proxy with a black-hole switch, to cut ONE instance off from its store.

``BlackholeProxy.start(host, port)`` listens on a free port of 127.0.0.1 and forwards each
connection to ``host:port`` from a thread of its own. ``blackhole()`` makes it silently stop
moving bytes in both directions, as a network that drops packets: nothing is closed and
no RST or FIN is sent, so the client's sockets stay open and its reads simply hang until
its own timeouts fire. New connections are accepted (the kernel completes the handshake)
but not forwarded. ``heal()`` lets traffic flow again: bytes held meanwhile are delivered,
as TCP would retransmit them, and connections accepted during the black hole are connected
to the target. ``close()`` stops it and closes every socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any

CHUNK = 65536


class BlackholeProxy:
    """One listening port forwarding to ``target``; black-holed on demand."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @classmethod
    def start(cls, target_host: str, target_port: int) -> BlackholeProxy:
        """A running proxy to ``target_host:target_port``; its port is ``.port``."""
        proxy = cls(target_host, target_port)
        proxy._thread.start()
        proxy._call(proxy._listen())
        return proxy

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    # -- switches (called from the test's thread) ---------------------------------------------
    def blackhole(self) -> None:
        """Drop traffic silently from now on (in both directions, on every connection)."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def heal(self) -> None:
        """Let traffic flow again."""
        self._loop.call_soon_threadsafe(self._flowing.set)

    @property
    def holed(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    # -- forwarding ------------------------------------------------------------------------
    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(client_w)
        try:
            await self._flowing.wait()  # a connection made in the black hole hangs
            try:
                server_r, server_w = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(server_w)
            try:
                await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
            finally:
                self._writers.discard(server_w)
                server_w.close()
        finally:
            self._writers.discard(client_w)
            client_w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                # Not reading while black-holed leaves the bytes in the kernel's buffers:
                # the sender sees no error, only silence (until its window fills).
                await self._flowing.wait()
                data = await reader.read(CHUNK)
                await self._flowing.wait()
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side ended: end the other too (half-closes are not needed by the stores).
            writer.close()
