"""The ``reflective`` command: a demo, and tools to inspect, export and import memory files.

Commands (``reflective --help`` and ``reflective <command> --help`` say more):

* ``reflective demo``: ingest a conversation into a memory file, answer questions by retrieval
  (every score component shown), reflect, and print the insights with the evidence they cite;
* ``reflective inspect FILE``: counts, models, reflection state and the newest memories;
  ``--plot PNG`` draws the timeline and the score components;
* ``reflective export FILE OUT.jsonl`` and ``reflective import IN.jsonl FILE``.
* ``reflective reflexion report FILE [--plot PNG]``: tables and reward curves of exported
  Reflexion loops (:mod:`langchain_reflective.reflexion.cli`).

User mistakes (a missing or foreign file, a bad option, a missing extra) end with one line on
stderr and a non-zero exit status; ``--debug`` shows the traceback instead. The exit status
follows one rule (:data:`EXIT_CODES`, also in ``reflective --help``): 2 when the command line
itself is wrong (unknown command or option, missing argument, an option value that can never
work), 1 when it is right but cannot be carried out (the files, the data, a model or a missing
extra), 130 when interrupted.

Needs the ``cli`` extra (typer, rich, matplotlib, pandas); importing the package never imports
this module.
"""

from __future__ import annotations

from langchain_reflective.cli._app import main, run

__all__ = ["app", "main", "run"]


def __getattr__(name: str) -> object:
    if name == "app":  # built only when the cli extra is installed
        from langchain_reflective.cli import _app

        return _app.app
    raise AttributeError(f"module 'langchain_reflective.cli' has no attribute {name!r}")
