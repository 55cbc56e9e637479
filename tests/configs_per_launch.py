"""Several configurations checked in one multi-process job, each reported on its own.

Every ``launch`` of ``P`` gloo processes pays its start-up, and on a 2-core machine each
collective waits for all ``P`` processes to be scheduled; a test parametrised over
configurations of the same ``P`` therefore runs them in one launch: the workers loop over the
configurations (:func:`run_each`), and the test checks each one in a subtest of its own
(``subtests.test(config=...)``), so a failing configuration is named and the others are still
checked.
"""
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any


def by_world_size(configs: Iterable[tuple]) -> dict[int, list[tuple]]:
    """``{P: [config, ...]}`` for configurations whose first entry is the world size ``P``."""
    groups: dict[int, list[tuple]] = defaultdict(list)
    for config in configs:
        groups[config[0]].append(tuple(config))
    return dict(groups)


def run_each(run: Callable[..., Any], configs: Iterable[tuple]) -> dict[tuple, Any]:
    """In a worker: ``{config: run(*config)}``; an exception names the configuration it came from
    (the whole job fails with it: its peers may be waiting in a collective of that configuration)."""
    results = {}
    for config in configs:
        try:
            results[config] = run(*config)
        except Exception as e:
            raise RuntimeError(f"configuration {config} failed on this rank") from e
    return results
