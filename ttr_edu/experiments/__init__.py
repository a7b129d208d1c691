"""Experiments that reproduce papers' findings at CPU scale; each writes a CSV that a chapter plots.

``python -m ttr_edu.experiments NAME [--quick] [--out PATH]`` with NAME one of:

* ``capacity``: setting 1 of Schlag et al. (2021), capacity against d_dot (:mod:`.capacity`, chapter 03);
* ``overwrite``: setting 2, sum rule against delta rule (:mod:`.overwrite`, chapter 04);
* ``mqar``: multi-query associative recall (:mod:`.mqar`, chapter 09);
* ``mqar_memories``: MQAR for Longhorn, DeltaProduct, TTT-Linear, TTT-MLP and Titans beside DeltaNet
  (:mod:`.mqar_memories`);
* ``lm``: tiny byte-level language models on the standard-library corpus (:mod:`.lm`, chapter 10);
* ``design_space``: the diagnostics of every point of the test-time-regression design space's coarse grid, which
  the book's static explorer draws (:mod:`.design_space`, chapter 13; a JSON file, not a grid of the runner).

Every grid runs through one runner (:mod:`.runner`): cells run here (``--jobs N`` local processes) or on a Dask
cluster (``--scheduler local:N`` or ``--scheduler tcp://HOST:8786``; ``docs/cluster.md``), rows land in the CSV as
cells finish, under lines that say how to reproduce them, and ``--resume`` finishes an interrupted run without ever
mixing two recipes. An argument error is one line and exit status 2; Ctrl-C is one line and exit status 130.

The CSVs the chapters plot are shipped in ``ttr_edu/experiments/results``
(:func:`ttr_edu.experiments.grid.load_shipped`, :func:`ttr_edu.experiments.mqar.load_results`, ...).
"""

import re

EXPERIMENTS = ("capacity", "overwrite", "mqar", "mqar_memories", "lm", "design_space")

#: what every experiment's command line prints on Ctrl-C (exit status 130)
INTERRUPTED = "interrupted: the rows written so far are kept; --resume runs the rest"


def plain_help(doc: str) -> str:
    """A module docstring as a terminal shows it in ``--help``: Sphinx roles and literals as plain names
    (``:class:`MQARModel``` and ````x```` become ``MQARModel`` and ``x``)."""
    doc = re.sub(r":[a-z]+:`~?\.?([^`]+)`", r"\1", doc)
    return doc.replace("``", "")
