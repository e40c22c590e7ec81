"""A TCP proxy between one worker and PostgreSQL that can partition them on demand.

Modes: ``pass`` forwards bytes both ways; ``drop`` aborts every proxied connection (the client
sees a reset) and refuses new ones until healed; ``blackhole`` stops forwarding in both
directions while keeping connections open (bytes queue up, so statements hang, as behind a
silent firewall) and holds new connections unconnected until healed. Healing (``pass``) resumes
the flow. Runs an asyncio loop on its own daemon thread; loopback only.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

MODES = ("pass", "drop", "blackhole")
CHUNK = 65536


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class TcpProxy:
    """Listens on 127.0.0.1:<port> and forwards to ``upstream_host:upstream_port``."""

    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0, *,
                 delay: float = 0.0) -> None:
        """``delay``: seconds each forwarded chunk waits (slow storage or a slow link)."""
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.delay = delay
        self._listen_port = listen_port
        self.port = 0
        self.mode = "pass"
        self.connections_total = 0
        self.connections_dropped = 0
        self._pairs: set[_Pair] = set()
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="tenure-chaos-proxy", daemon=True)
        self._ready = threading.Event()

    # -- control (any thread) -----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @classmethod
    def to(cls, dsn: str, *, delay: float = 0.0) -> TcpProxy:
        """A started proxy in front of the server that ``dsn`` names (TCP DSNs only)."""
        import psycopg
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        proxy = cls(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432), delay=delay)
        proxy.start()
        return proxy

    def dsn_for(self, dsn: str) -> str:
        """``dsn`` rewritten to connect through this proxy."""
        import psycopg
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        info.update(host="127.0.0.1", port=str(self.port))
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})

    def set_mode(self, mode: str) -> None:
        """Switch to ``pass`` (heal), ``drop`` or ``blackhole``; returns once applied."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        asyncio.run_coroutine_threadsafe(self._set_mode(mode), self._loop).result(timeout=10)

    # -- the loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._listen())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self._listen_port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            pair.abort()
        self._pairs.clear()

    async def _set_mode(self, mode: str) -> None:
        assert self._flowing is not None
        self.mode = mode
        if mode == "pass":
            self._flowing.set()
            return
        self._flowing.clear()
        if mode == "drop":
            for pair in list(self._pairs):
                pair.abort()
                self.connections_dropped += 1
            self._pairs.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        self.connections_total += 1
        if self.mode == "drop":
            writer.transport.abort()
            return
        pair = _Pair(writer)
        self._pairs.add(pair)
        try:
            await self._flowing.wait()  # blackhole: hold the new connection unconnected
            if pair not in self._pairs:
                return
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            pair.upstream = up_writer
            if pair not in self._pairs:
                pair.abort()
                return
            await asyncio.gather(self._pump(reader, up_writer, pair), self._pump(up_reader, writer, pair))
        except OSError:
            pass
        finally:
            self._pairs.discard(pair)
            pair.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: _Pair) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                if pair not in self._pairs:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            pair.abort()
