"""Command-line parsing shared by every Rightsizer command: ``--help`` with examples, environment
variables and exit codes, and a close flag suggested for a mistyped one. Abbreviated flags are
refused (``allow_abbrev=False``): ``--simulat`` would otherwise mean ``--simulate`` today and
something else, or nothing, once a flag beginning the same way is added.

argparse checks required options before it reports unknown ones, so ``rightsizer plan --parms 7B``
would only say that one of --params, --model, --config is required; here unknown flags are looked
at first, and the nearest known flag (difflib) is named; so is the nearest command for an unknown
one (``rightsizer reprot``: did you mean report?).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from typing import Any


def epilog(
    examples: Sequence[tuple[str, str]],
    environment: Sequence[tuple[str, str]],
    exit_codes: Sequence[tuple[str, str]],
    extra: str = "",
) -> str:
    """The part of ``--help`` after the options: examples (comment, command), then the environment
    variables and exit codes, each as (name, meaning)."""
    lines = ["examples:"]
    for comment, command in examples:
        lines += [f"  # {comment}", f"  {command}"]
    if extra:
        lines += ["", extra.rstrip()]
    lines += ["", "environment:"]
    lines += [f"  {name:<28} {meaning}" for name, meaning in environment] or ["  none read"]
    lines += ["", "exit codes:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in exit_codes]
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog keeps its line breaks (it may be built lazily, only for
    ``--help``), which takes no abbreviated flag (its commands' parsers neither) and which
    suggests the close flag for an unknown one."""

    def __init__(self, *args: Any, epilog_factory: Callable[[], str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.epilog_factory = epilog_factory

    def format_help(self) -> str:
        if self.epilog_factory is not None and self.epilog is None:
            self.epilog = self.epilog_factory()
        return super().format_help()

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        self._check_flags(argv)
        return super().parse_known_args(argv, namespace)

    def _commands(self) -> set[str]:
        names: set[str] = set()
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                names.update(action.choices)
        return names

    def _check_flags(self, argv: Sequence[str]) -> None:
        commands = self._commands()
        known = sorted(self._option_string_actions)
        value_next = False  # the token is the value of the flag before it
        for token in argv:
            if token == "--" or token in commands:
                return  # the rest belongs to the positional arguments or to a command's own parser
            if commands and not token.startswith("-") and not value_next:
                close = difflib.get_close_matches(token, sorted(commands), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]}?" if close else ""
                self.error(f"unknown command {token!r} (commands: {', '.join(sorted(commands))}){hint}")
            action = self._option_string_actions.get(token)
            value_next = action is not None and action.nargs != 0
            if not token.startswith("--") or len(token) < 3:
                continue
            name = token.split("=", 1)[0]
            if name in self._option_string_actions:
                continue
            flags = [k for k in known if k.startswith("--")]
            # An abbreviation names every flag it begins (up to three), a typo the closest one.
            close = [k for k in flags if k.startswith(name)][:3]
            close = close or difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            self.error(f"unrecognized argument {name}{hint}")
