from pathlib import Path

import pytest

import voicefactory


def test_bench_defaults_to_every_measurement() -> None:
    args = voicefactory.build_parser().parse_args(["bench", "--quick", "--json", "out.json"])
    assert (args.suite, args.quick, args.json, args.only) == ("all", True, "out.json", None)
    assert (args.plots_dir, args.work_dir) == (None, None)  # resolved when the command runs


def test_bench_output_defaults_follow_the_folder_it_runs_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a checkout: plots to its docs/img; from anywhere else: beside the report (the
    work dir is <state dir>/bench, never relative to the current folder)."""
    checkout = Path(voicefactory.__file__).resolve().parent
    monkeypatch.chdir(checkout / "docs")
    assert voicefactory._default_plots_dir(tmp_path / "w") == checkout / "docs" / "img"
    monkeypatch.chdir(tmp_path)
    assert voicefactory._default_plots_dir(tmp_path / "w") == tmp_path / "w" / "img"


def test_bench_only_takes_known_names_and_assignors_still_parses() -> None:
    args = voicefactory.build_parser().parse_args(["bench", "--only", "cache", "faults"])
    assert args.only == ["cache", "faults"]
    assert voicefactory.build_parser().parse_args(["bench", "assignors"]).suite == "assignors"


def test_bench_rejects_an_unknown_measurement_with_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        voicefactory.build_parser().parse_args(["bench", "--only", "speed"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'speed'" in capsys.readouterr().err


def test_bench_only_takes_lanes() -> None:
    args = voicefactory.build_parser().parse_args(["bench", "--quick", "--only", "lanes",
                                                   "--json", "x.json"])
    assert (args.only, args.quick, args.json) == (["lanes"], True, "x.json")
