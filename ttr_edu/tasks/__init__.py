"""The data the models learn from: synthetic tasks and real data that ships offline.

* :mod:`.retrieval`: the retrieval settings of Schlag et al. (2021) and a switching-regression stream;
* :mod:`.mqar`: multi-query associative recall, generated as Zoology does;
* :mod:`.images`: scikit-learn's digits (offline) and MNIST on request;
* :mod:`.text`: the Python standard library's source as a byte corpus.
"""

from ttr_edu import moved_name

__getattr__ = moved_name(__name__)  # the names of the old flat module ttr_edu.tasks, for one release
