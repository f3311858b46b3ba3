"""bench/run_all.py --write-readme: the figures go between bench/README.md's markers, and nowhere else."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_run_all() -> Any:
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_all = _load_run_all()
START, END = run_all.FIGURES_START, run_all.FIGURES_END
BEFORE = "# Benchmarks\n\nHow they are measured.\n\n"
AFTER = "\n\nWhat the figures mean | and | more.\n"


def readme(between: str = "\nold figures\n") -> str:
    return f"{BEFORE}{START}{between}{END}{AFTER}"


def test_the_figures_replace_what_lies_between_the_markers_and_nothing_else():
    out = run_all.replace_between_markers(readme(), "new figures\n| a | b |")
    assert out == f"{BEFORE}{START}\nnew figures\n| a | b |\n{END}{AFTER}"
    assert out.startswith(BEFORE + START) and out.endswith(END + AFTER)
    assert "old figures" not in out


def test_writing_twice_is_writing_once():
    once = run_all.replace_between_markers(readme(), "figures")
    assert run_all.replace_between_markers(once, "figures") == once
    assert run_all.replace_between_markers(readme(between=""), "figures") == once  # markers side by side


@pytest.mark.parametrize("missing", [START, END])
def test_a_missing_marker_is_an_error_naming_the_file_and_the_marker(missing: str):
    text = readme().replace(missing, "")
    with pytest.raises(run_all.MarkerError) as caught:
        run_all.replace_between_markers(text, "figures", source="bench/README.md")
    assert "bench/README.md" in str(caught.value) and missing in str(caught.value)
    assert "is missing" in str(caught.value)


def test_a_repeated_or_reversed_marker_is_an_error():
    with pytest.raises(run_all.MarkerError, match="appears 2 times"):
        run_all.replace_between_markers(readme() + START, "figures")
    with pytest.raises(run_all.MarkerError, match="comes before"):
        run_all.replace_between_markers(f"{END}\n{START}\n", "figures")


def test_the_block_says_when_where_and_how():
    block = run_all.figures_block("figure  ours\n------  ----\nx: y    1 ms\n", date="2026-12-04 21:00 UTC", cpus=2,
                                  command="python bench/run_all.py --quick --write-readme")
    assert "2026-12-04 21:00 UTC" in block and "2 CPUs" in block
    assert "python bench/run_all.py --quick --write-readme" in block
    assert "x: y    1 ms" in block


def test_write_readme_rewrites_the_file_between_its_markers(tmp_path: Path):
    path = tmp_path / "README.md"
    path.write_text(readme())
    run_all.write_readme("the table\n", ["--quick", "--write-readme"], path)
    text = path.read_text()
    assert text.startswith(BEFORE + START) and text.endswith(END + AFTER)
    assert "the table" in text and "python bench/run_all.py --quick --write-readme" in text


def test_write_readme_without_the_file_says_which_file(tmp_path: Path):
    with pytest.raises(run_all.MarkerError, match="no such file"):
        run_all.write_readme("the table\n", [], tmp_path / "README.md")


def test_a_readme_without_markers_stops_the_run_before_any_benchmark(tmp_path: Path, monkeypatch, capsys):
    path = tmp_path / "README.md"
    path.write_text("# Benchmarks\n")
    monkeypatch.setattr(run_all, "README", path)
    with pytest.raises(SystemExit) as exited:
        run_all.main(["--write-readme", "--only", "journal"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and START in err
    assert "running" not in err
    assert path.read_text() == "# Benchmarks\n"
