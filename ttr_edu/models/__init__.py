"""Tiny models built from the library's layers, small enough to train on a CPU.

* :mod:`.retrieval`: the single-layer retrieval model of Schlag, Irie and Schmidhuber (2021, §6.1), chapters 03-04;
* :mod:`.mqar`: one-layer models for multi-query associative recall, chapter 09;
* :mod:`.lm`: byte-level language models with recurrent generation, chapter 10.
"""

from ttr_edu import moved_name

__getattr__ = moved_name(__name__)  # the names of the old flat module ttr_edu.models, for one release
