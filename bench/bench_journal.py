"""What the prompt journal adds to admission: ``POST /session/:id/prompt`` to its 202, three ways in one run.

- ``journal+fsync``: the default (``storage.fsync: "always"``) — the admission
  is written and fsynced before the 202, so it survives a machine crash;
- ``journal``: ``storage.fsync: "never"`` — written before the 202, survives the
  daemon being killed, not a power cut;
- ``no journal``: a daemon without a state directory — the floor.

Three daemons in this process (the command line always has a state directory,
so the floor can only be opened in-process: ``open_daemon(state_dir=None)``),
each served by ``transport.serve`` over loopback HTTP; requests go to each in
turn (A B C A B C …), one at a time, each followed by a short untimed pause so
the admitted turn (a scripted "ok") ends; medians compared. The state
directories are on the disk of the working directory, where a daemon's
``.trellis`` would be. No targets: the figures say what durability costs.

    python bench/bench_journal.py [--prompts 300] [--json]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, Figure, ainterleave, emit, median  # noqa: E402

from actors import Settings, load_script, open_daemon  # noqa: E402
from transport import serve  # noqa: E402

BENCH = "journal"
TOKEN = "bench-token"
BODY = {"prompt": [{"type": "text", "text": "hello"}]}
SETTLE = 0.002


async def run(prompts: int, root: str) -> dict[str, list[float]]:
    variants = {"journal+fsync": ("always", f"{root}/fsync"), "journal": ("never", f"{root}/nofsync"),
                "no journal": ("always", None)}
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        admit = {}
        for name, (fsync, state_dir) in variants.items():
            model = load_script({"responses": [[{"text": "ok"}]] * (prompts + 20)})
            settings = Settings(journal_fsync=fsync, sandbox="off")
            daemon = await stack.enter_async_context(open_daemon(settings, model=model, state_dir=state_dir))
            url = await nursery.start(partial(serve, daemon, port=0, token=TOKEN))
            client = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30))
            sid = (await client.post("/session", json={})).json()["sessionId"]

            async def one(client: httpx.AsyncClient = client, sid: str = sid) -> float:
                start = time.perf_counter()
                r = await client.post(f"/session/{sid}/prompt", json=BODY)
                elapsed = time.perf_counter() - start
                assert r.status_code == 202, r.text
                await trio.sleep(SETTLE)  # let the turn run, so queues stay short
                return elapsed

            admit[name] = one
        for one in admit.values():  # warm up
            await one()
        return await ainterleave(prompts, admit)


def measure(quick: bool = False, prompts: int | None = None) -> list[Figure]:
    prompts = prompts or (100 if quick else 300)
    logging.getLogger("trellis.sandbox").setLevel(logging.ERROR)  # off on purpose: no command runs here
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".bench-journal-") as root:
        samples = trio.run(run, prompts, root)
    ms = {name: median(xs) * 1000 for name, xs in samples.items()}
    return [Figure(BENCH, f"POST prompt -> 202, {name}", ms[name], ms["no journal"], "ms", floor_name="no journal")
            for name in ("journal+fsync", "journal")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(args.quick, None if args.quick else args.prompts), title="the prompt journal's cost at admission",
         as_json=args.json)


if __name__ == "__main__":
    main()
