"""The documentation's reference pages, generated from the code and committed under docs/reference/, so that every
link to them resolves on the repository as on the site: `python -m tools.reference_pages` writes them (as
`make blocks` does), and tests/test_doc_links.py fails while a committed page differs from what the code gives.

Every knob (each mechanism's knob model: its description, default and range), every metric (the registry's), the
command line (its argparse parser), the built-in grids (the package's condition files) and one Python API page per
layer of the package (mkdocstrings renders the docstrings at build time). Nothing here is typed by hand, so none of
it goes stale: a renamed knob or module changes its page, and a page that links to a name that is gone fails the
strict build.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import types
import typing
from pathlib import Path

import annotated_types
from pydantic.fields import FieldInfo

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs the pages list)
from harness.cli.arguments import BUILTIN_GRIDS
from harness.cli.dispatch import build_parser
from harness.engine.metrics import all_metrics
from harness.grid import registry
from harness.grid.knobs import HOST_ONLY, UNIT
from harness.rendering.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HELP_WIDTH = "100"


def knob_fields() -> dict[str, FieldInfo]:
    """Every knob of a condition -> its pydantic field (documentation, default, constraints, extras)."""
    return {name: field for knobs in mechanism_knobs().values() for name, field in knobs.items()}


def mechanism_knobs() -> dict[str, dict[str, FieldInfo]]:
    """Each built-in mechanism with knobs -> its knobs' fields, in the order the mechanisms are registered."""
    return {
        name: dict(entry.mechanism.knobs.model_fields)
        for name, entry in registry.catalog().items()
        if entry.builtin and entry.mechanism.knobs is not None
    }


def _plain(text: str) -> str:
    """Text with Markdown's inline syntax escaped (q*-labelled, batch*f and x[i] stay as written)."""
    return re.sub(r"([\\`*_\[\]<>])", r"\\\1", text)


def _constraint(constraint: object) -> str | None:
    bounds = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
    for attribute, symbol in bounds:
        value = getattr(constraint, attribute, None)
        if value is not None and isinstance(constraint, annotated_types.BaseMetadata):
            return f"{symbol} {value:g}"
    return None


def knob_range(field: FieldInfo, unit: str | None = None) -> str:
    """A knob's allowed values, read from its field: its choices, or its bounds and type (and what it counts)."""
    annotation = field.annotation
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        arguments = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
        optional, annotation = len(arguments) < len(typing.get_args(annotation)), arguments[0]
    if typing.get_origin(annotation) is typing.Literal:
        allowed = ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    else:
        kind = {bool: "true or false", int: "a whole number", float: "a number"}[annotation]
        kind += f" of {unit}" if unit else ""
        bounds = [bound for bound in map(_constraint, field.metadata) if bound is not None]
        allowed = f"{kind} {', '.join(bounds)}" if bounds else kind
    return f"{allowed}, or unset" if optional else allowed


def _default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value:g}`"


def knobs_page() -> str:
    sections = []
    for mechanism, fields in mechanism_knobs().items():
        rows = []
        for name, field in fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            where = "host only (before the program)" if extra.get(HOST_ONLY) else "in the compiled program"
            allowed = knob_range(field, extra.get(UNIT))
            rows.append([f"`{name}`", _plain(field.description or ""), _default(field.default), allowed, where])
        summary = _plain(registry.mechanism(mechanism).summary)
        table = markdown_table(["Knob", "What it does", "Default", "Allowed", "Acts"], rows)
        sections.append(
            f"## `{mechanism}`\n\n{summary[0].upper() + summary[1:]} "
            f"([`harness.mechanisms.{mechanism}`][harness.mechanisms.{mechanism}]).\n\n{table}"
        )
    return (
        "# Knobs\n\n"
        "Every knob of a condition (`[conditions.NAME]` in a condition file, or the dict `harness.grid_from_dict` "
        "takes), by the mechanism that declares it, generated from each mechanism's knob model: their "
        "documentation, defaults and ranges. Knobs compose freely; a list of values sweeps a knob (see "
        "[Writing a condition](../tutorials/writing-a-condition.md)). A knob that acts in the compiled program "
        "enters it as an array, so a change of its value never recompiles; a host-only knob acts before the program "
        "runs (in pretraining). `coevolab list FILE --all` shows every knob of every condition, resolved. A "
        "mechanism a condition file loads adds its own.\n\n" + "\n\n".join(sections)
    )


def metrics_page() -> str:
    rows = [
        [
            f"`{metric.name}`",
            _plain(metric.label),
            _plain(metric.unit) or "—",
            metric.kind,
            _plain(metric.definition),
            "yes" if metric.headline else "",
        ]
        for metric in all_metrics()
    ]
    table = markdown_table(["Column", "Label", "Unit", "Type", "Definition", "Headline"], rows)
    return (
        "# Metrics\n\n"
        "Every diagnostic a run records, one column of `metrics.csv.gz` each, per condition × seed × outer iteration "
        "(iteration 0 is before training), generated from the registry "
        "([`harness.engine.metrics`][harness.engine.metrics]: the loop's own, and each mechanism's). Each is "
        "computed exactly inside the compiled program from the run's view of every output of the world (no "
        "sampling). Headline metrics are the curves every report draws. A new metric is one entry of the registry "
        "(see [Your mechanism in one file]"
        "(../tutorials/your-mechanism.md)).\n\n" + table
    )


def _help(parser: argparse.ArgumentParser) -> str:
    """The parser's --help text at a fixed width, with this machine's home directory written as ~."""
    return parser.format_help().replace(str(Path.home()), "~").rstrip()


def cli_page() -> str:
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps at the terminal's width
    parser = build_parser()
    (commands,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in commands._choices_actions}
    sections = [
        "# Command line\n\n"
        "Generated from the `coevolab` command's own parser (`build_parser` in [`harness.cli`][harness.cli]): what "
        "`--help` prints for the command and for each subcommand. How to use them: [Run grids from the command "
        "line](../how-to/command-line.md).\n\n"
        f"```text\n{_help(parser)}\n```"
    ]
    for name, subparser in commands.choices.items():
        sections.append(f"## coevolab {name}\n\n{summaries[name].capitalize()}.\n\n```text\n{_help(subparser)}\n```")
    return "\n\n".join(sections) + "\n"


def _opening_comment(path: Path) -> str:
    """The first paragraph of the comment a condition file opens with, joined into one line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    opening = itertools.takewhile(lambda line: line.startswith("#") and line.strip() != "#", lines)
    return " ".join(line.removeprefix("#").strip() for line in opening)


def condition_files_page() -> str:
    grids = sorted(BUILTIN_GRIDS.glob("*.toml"), key=lambda path: path.stem)
    rows = [[f"`{path.stem}`", (_opening_comment(path))] for path in grids]
    example = (BUILTIN_GRIDS / "example.toml").read_text(encoding="utf-8")
    return (
        "# Built-in grids and condition files\n\n"
        "The condition files the package ships (the repository's `conditions/` folder; an installed wheel carries "
        "them too). A command takes a built-in grid by name from any directory, `coevolab run tiny` or "
        "`coevolab list paper`, or any condition file by its path. Each file's own opening comment:\n\n"
        + markdown_table(["Name", "What it is"], rows)
        + "\n\n## The commented template\n\n"
        "`example.toml`, every section a condition file may have, with the defaults (see [Writing a condition]"
        "(../tutorials/writing-a-condition.md) and the [knobs](knobs.md)):\n\n"
        f"```toml\n{example.rstrip()}\n```\n"
    )


def api_pages() -> dict[str, str]:
    """One page per folder of the package (its layers; mkdocs.yml's nav names each, and a strict build fails on a
    page it leaves out): every module of the folder, rendered from its docstrings by mkdocstrings; and the top."""
    package = ROOT / "harness"
    pages = {
        "harness": "# harness\n\nThe public Python API: `import harness` (re-exported from `harness.api` and the "
        "modules named below; see [The Python API](../../tutorials/python-api.md)); each name once, where it is "
        "defined.\n\n::: harness\n    options:\n      members: false\n\n::: harness.api\n"
    }
    layers = sorted(folder.name for folder in package.iterdir() if (folder / "__init__.py").is_file())
    for layer in layers:
        modules = sorted(
            ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for path in (package / layer).rglob("*.py")
            if path.name != "__main__.py"
        )
        pages[layer] = f"# harness.{layer}\n\n" + "\n\n".join(f"::: {module}" for module in modules) + "\n"
    return pages


def pages() -> dict[str, str]:
    """Every generated reference page: its path under docs/ -> its text."""
    found = {
        "reference/knobs.md": knobs_page(),
        "reference/metrics.md": metrics_page(),
        "reference/cli.md": cli_page(),
        "reference/condition-files.md": condition_files_page(),
    }
    return found | {f"reference/api/{layer}.md": text for layer, text in api_pages().items()}


def main() -> None:
    for relative, text in pages().items():
        path = DOCS / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"rewrote docs/{relative}")


if __name__ == "__main__":
    main()
