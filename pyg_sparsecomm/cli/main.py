"""``python -m pyg_sparsecomm COMMAND``: the package's command line.

``python -m pyg_sparsecomm --help`` lists the commands, ``python -m pyg_sparsecomm COMMAND --help``
describes one.  Parsing imports neither torch nor PyG (the help answers at once): a command's module
builds its parser from the standard library and imports the rest of the package when it runs.
"""
import argparse
import importlib
import sys

DESCRIPTION = "pyg_sparsecomm's commands: partition a graph for a training job, compare partitioning methods."

#: command -> (the package's module whose ``main(argv)`` runs it, one-line description)
COMMANDS = {
    "partition-stats": ("partition_stats",
                        "communication volumes of partitioning methods on a graph: a table, a heatmap, bars"),
    "partition": ("partition",
                  "partition a graph stored as .npy files, out of core, into the part files load_shard reads"),
    "check-port": ("check_port",
                   "run a PyG script and its port side by side; name the first loss or parameter that differs"),
}


# the commands -------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m pyg_sparsecomm``: the command and, unparsed, its arguments."""
    p = argparse.ArgumentParser(prog="python -m pyg_sparsecomm", description=DESCRIPTION,
                                epilog="'python -m pyg_sparsecomm COMMAND --help' describes a command's options.")
    commands = p.add_subparsers(title="commands", dest="command", required=True)
    for name, (_, summary) in COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)  # the command's own parser reads the rest
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the command ``argv`` names (``sys.argv[1:]`` by default); ``--help`` lists the commands,
    no command or an unknown one exits with status 2 naming them."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        args, rest = build_parser().parse_known_args(argv)  # exits unless a command follows options
        argv = [args.command, *rest]
    command = importlib.import_module(f"{__package__}.{COMMANDS[argv[0]][0]}")
    return command.main(argv[1:])
