"""The `run` and `submit` render flags are the render request's declaration (docs/design.md §6):
one flag per `RenderSpec` field, named after it, with the declared type, limits, help and
default, and no other default than the spec's own."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from batchcrop.cli.exit_codes import Exit
from batchcrop.cli.main import build_parser, main
from batchcrop.crop import RenderSpec
from batchcrop.crop.fields import RenderField

COMMANDS = ("run", "submit")
DECLARED = RenderSpec.declarations()


def _command(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    command: argparse.ArgumentParser = sub.choices[name]
    return command


def _flag(command: str, declared: RenderField) -> argparse.Action:
    actions = [a for a in _command(command)._actions if declared.flag in a.option_strings]
    assert actions, f"batchcrop {command} has no {declared.flag} for the render field"
    (action,) = actions
    return action


def _limits(declared: RenderField) -> str:
    if declared.choices:
        return ", ".join(declared.choices)
    if declared.text:
        return ""
    return f"{declared.low} to {declared.high}"


def _shown(declared: RenderField) -> str:
    default = declared.default_record
    if declared.is_list:
        return ",".join(str(v) for v in default) or "none"
    return str(default)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("declared", DECLARED, ids=[d.name for d in DECLARED])
def test_every_render_field_has_its_flag_as_declared(command: str, declared: RenderField) -> None:
    """The flag is `--max-side` for `max_side`, reads a whole number, a text (one of its choices,
    when it has them) or a comma-separated text, and its help holds the declared help, limits and
    default; unset, it leaves the default to the spec."""
    action = _flag(command, declared)
    assert (action.dest, action.type, action.default) == (
        declared.name,
        int if declared.kind == "whole" else str,
        None,
    )
    assert action.help is not None
    for part in (declared.help, _limits(declared), f"(default {_shown(declared)})"):
        assert part in action.help


@pytest.mark.parametrize("command", COMMANDS)
def test_unset_render_flags_give_the_declared_defaults(command: str) -> None:
    """A command line without render flags asks for the spec's defaults."""
    args = build_parser().parse_args([command, "photos"])
    assert RenderSpec() == RenderSpec.from_input(vars(args))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_render_flag_reaches_the_spec(command: str) -> None:
    """Each flag's value is handed to the spec by the field's name."""
    flags = ["--ratios", "16:9,1:1", "--quality", "70", "--formats", "webp"]
    flags += ["--widths", "320,640", "--fit", "auto", "--pad-colour", "#000"]
    flags += ["--trim", "12", "--background", "#102030"]
    flags += ["--quality-match", "jpeg"]
    spec = RenderSpec.from_input(vars(build_parser().parse_args([command, "photos", *flags])))
    expected = RenderSpec.from_input(
        {
            "ratios": ["16:9", "1:1"],
            "quality": 70,
            "formats": ["webp"],
            "widths": ["320", "640"],
            "fit": "auto",
            "pad_colour": "#000000",
            "trim": 12,
            "background": "#102030",
            "quality_match": "jpeg",
        }
    )
    assert expected == spec
    max_side = RenderSpec.from_input(
        vars(build_parser().parse_args([command, "photos", "--max-side", "640"]))
    )
    assert max_side.max_side == 640
    # Every field but max_side (the single-size form widths replace) off its default, so a
    # flag not handed over would show.
    assert [d.name for d in DECLARED if getattr(spec, d.name) == d.default] == ["max_side"]


def test_help_shows_every_render_flag_with_its_argument(capsys: pytest.CaptureFixture[str]) -> None:
    """`submit --help` lists each render flag with the form of its value and its help."""
    with pytest.raises(SystemExit) as exited:
        main(["submit", "--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for declared in DECLARED:
        value = {"list": f"{declared.noun.upper()},...", "text": "TEXT", "whole": "N"}[
            declared.kind
        ]
        value = "|".join(declared.choices) if declared.text and declared.choices else value
        assert f"{declared.flag} {value} {declared.help}" in shown


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-side", "5"], "--max-side must be in 16..10000, got 5"),
        (["--quality", "101"], "--quality must be in 1..100, got 101"),
        (
            ["--ratios", "1:1,16/9"],
            "--ratios: ratio must look like 16:9 (two whole numbers), got '16/9'",
        ),
        (["--ratios", "1:1,1:1"], "--ratios must be distinct"),
        (["--formats", "jpeg,gif"], "--formats: 'gif' is not one of jpeg, webp, avif"),
        (["--fit", "fill"], "--fit: 'fill' is not one of crop, pad, auto"),
        (
            ["--pad-colour", "reddish"],
            "--pad-colour: 'reddish' is not a colour: write it #rrggbb (#ffffff is white) or auto",
        ),
        (
            ["--background", "#12345"],
            "--background: '#12345' is not a colour: write it #rrggbb (#ffffff is white)",
        ),
        (["--widths", "320,8"], "--widths: a width must be in 16..10000, got 8"),
        (
            ["--widths", "320,wide"],
            "--widths: a width must be a whole number of pixels, got 'wide'",
        ),
        (
            ["--widths", "16,32,64,128,256,512,1024,2048,4096"],
            "--widths must hold 0..8 widths, got 9",
        ),
        (
            ["--widths", "640", "--max-side", "800"],
            "--widths and --max-side are two forms of the output size: give one of them",
        ),
        (["--trim", "200"], "--trim must be in 0..128, got 200"),
        (["--quality-match", "ssim"], "--quality-match: 'ssim' is not one of table, jpeg"),
    ],
)
def test_a_bad_render_flag_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    """A value outside the declaration is exit 2 and one line saying which flag and why (the
    API's message, its field names written as the flags)."""
    database = f"sqlite:///{tmp_path / 'batchcrop.db'}"
    code = main(["submit", str(tmp_path), "--database-url", database, *flags])
    assert (code, capsys.readouterr().err) == (Exit.USAGE, f"batchcrop: error: {message}\n")


def test_a_bad_attempts_cap_names_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--max-attempts` outside 1..100 is exit 2 naming the flag, not the request's field."""
    database = f"sqlite:///{tmp_path / 'batchcrop.db'}"
    code = main(["submit", str(tmp_path), "--database-url", database, "--max-attempts", "0"])
    said = "batchcrop: error: --max-attempts must be in 1..100, got 0\n"
    assert (code, capsys.readouterr().err) == (Exit.USAGE, said)
