"""Deterministic scenario replays of the real actors (``python -m actors.replay``).

A scenario (``actors/replay/scenarios/*.json``, format in that directory's ``README.md``) declares
settings, a scripted model, a timeline of external inputs at virtual times,
and what must hold. :func:`replay` runs it in process under
``MockClock(autojump_threshold=0)`` with Trio's scheduler seeded, records a
canonical trace and returns its SHA-256 digest and any failures::

    result = replay("actors/replay/scenarios/fifo_order.json", seed=3)
    assert result.ok, result.failures

A scenario may leave times open — windows ``{"between": [lo, hi]}`` that each seed
fills in (:mod:`.jitter`) — and start actions together in the scheduler's order;
:func:`~actors.replay.explore.explore` replays fresh seeds and
:func:`~actors.replay.explore.shrink` reduces a failing seed's windows to the
smallest schedule that still fails. Invariants check the spec's properties on
every seed, from the model's requests (:mod:`.spec_invariants`).

Extend it by registering timeline actions (:func:`register_action`) and
invariants (:func:`register_invariant`) in the tables of :mod:`.registry`. Hook
commands are scripted, never run (``hooks.py``); subagent runs use the real
registry, their signal calls served in process rather than over HTTP
(``subagents.py``); a scenario that states behaviour the runtime lacks is
marked ``known_bug`` and must fail until it is fixed.

A live session recorded by a daemon (``--record DIR``: :class:`~.recorder.Recorder`, the format in
:mod:`.recording`) replays with :func:`~.playback.replay_recording`, its events, model requests and the
answers to its client calls compared with the recorded ones, and becomes a scenario with
:func:`~.to_scenario.to_scenario`.
"""

from .determinism import NotDeterministic, apply_seed, run_deterministic
from .explore import explore, shrink
from .fields import Field, ScenarioError
from .jitter import Schedule, Window
from .playback import Difference, PlaybackResult, replay_recording
from .recorder import Recorder
from .recording import Recording, RecordingError, read_recording
from .registry import ACTIONS, INVARIANTS, register_action, register_invariant
from .runner import Result, replay
from .scenario import Scenario, Step, load_scenario, parse_scenario
from .trace import Trace, format_trace
from .world import World

__all__ = [
    "ACTIONS", "INVARIANTS", "Difference", "Field", "PlaybackResult", "Recorder", "Recording", "RecordingError",
    "Result", "Scenario", "ScenarioError", "Schedule", "Step", "Trace", "Window",
    "NotDeterministic", "World", "apply_seed", "explore", "format_trace", "load_scenario", "parse_scenario", "read_recording",
    "register_action",
    "register_invariant", "replay", "replay_recording", "run_deterministic", "shrink",
]
