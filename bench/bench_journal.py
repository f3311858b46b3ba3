"""What the prompt journal adds to admission: ``POST /session/:id/prompt`` to its 202, three ways in one run.

- ``journal+fsync``: the default (``storage.fsync: "always"``) — the admission
  is written and fsynced before the 202, so it survives a machine crash;
- ``journal``: ``storage.fsync: "never"`` — written before the 202, survives the
  daemon being killed, not a power cut;
- ``no journal``: a daemon without a state directory — the floor.

Three daemons in this process, each served over loopback HTTP; requests
alternate between them, one at a time, so all three see the same machine.

    python bench/bench_journal.py [--prompts 300]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from functools import partial

import httpx
import trio

from actors import Settings, load_script, open_daemon
from transport import serve

TOKEN = "bench-token"


async def measure(prompts: int, root: str) -> dict[str, list[float]]:
    variants = {"journal+fsync": ("always", f"{root}/fsync"), "journal": ("never", f"{root}/nofsync"),
                "no journal": ("always", None)}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    body = {"prompt": [{"type": "text", "text": "hello"}]}
    async with AsyncExitStack() as stack:
        daemons = {}
        for name, (fsync, state_dir) in variants.items():
            model = load_script({"responses": [[{"text": "ok"}]] * (prompts + 20)})
            settings = Settings(journal_fsync=fsync, sandbox="off")
            daemons[name] = await stack.enter_async_context(open_daemon(settings, model=model, state_dir=state_dir))
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        clients = {}
        for name, daemon in daemons.items():
            url = await nursery.start(partial(serve, daemon, port=0, token=TOKEN))
            client = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30))
            sid = (await client.post("/session", json={})).json()["sessionId"]
            clients[name] = (client, sid)
        for client, sid in clients.values():  # warm up
            await client.post(f"/session/{sid}/prompt", json=body)
        for i in range(prompts):
            names = list(clients)
            for name in names[i % 3:] + names[:i % 3]:  # rotate who goes first
                client, sid = clients[name]
                start = time.perf_counter()
                r = await client.post(f"/session/{sid}/prompt", json=body)
                samples[name].append(time.perf_counter() - start)
                assert r.status_code == 202, r.text
                await trio.sleep(0.002)  # let the turn run, so queues stay short
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=300)
    args = parser.parse_args()
    logging.getLogger("trellis.sandbox").setLevel(logging.ERROR)  # off on purpose: no command runs here
    with tempfile.TemporaryDirectory(dir=".") as root:  # on the disk the state directory would be on
        samples = trio.run(measure, args.prompts, root)
    floor = statistics.median(samples["no journal"])
    print(f"{'admission':<15}{'requests':>9}{'median ms':>11}{'p99 ms':>9}{'vs floor':>10}")
    for name, xs in samples.items():
        xs.sort()
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        print(f"{name:<15}{len(xs):>9}{statistics.median(xs) * 1e3:>11.3f}{p99 * 1e3:>9.3f}"
              f"{(statistics.median(xs) - floor) * 1e3:>+9.3f}ms")


if __name__ == "__main__":
    main()
