"""``python -m actors.replay`` finds the bundled scenario library from any working directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from actors.replay.cli import BUNDLED, default_paths

ROOT = Path(__file__).resolve().parents[3]


def test_the_library_lives_in_the_package() -> None:
    import actors.replay

    assert BUNDLED == Path(actors.replay.__file__).resolve().parent / "scenarios"
    assert len(list(BUNDLED.glob("*.json"))) > 40 and (BUNDLED / "README.md").exists()


def test_replays_run_from_outside_the_repository(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "actors.replay", "--seeds", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "expected a readable file" not in done.stdout + done.stderr
    summary = done.stdout.splitlines()[-1]
    assert summary.startswith(f"{len(list(BUNDLED.glob('*.json')))} scenario(s) x 1 seed(s)"), summary
    assert "all passed" in summary


def test_trellis_replay_finds_them_too(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "trellis", "replay", "--seeds", "1", "--seed", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "trellis replay" in done.stderr  # the prog it was given (argparse refuses)
    done = subprocess.run([sys.executable, "-m", "trellis", "replay", "--seeds", "1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith("all passed")


def test_the_default_is_shown_relative_to_the_working_directory_when_under_it(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(ROOT)
    assert default_paths() == [str(Path("actors", "replay", "scenarios"))]
    monkeypatch.chdir(tmp_path)
    assert default_paths() == [str(BUNDLED)]
