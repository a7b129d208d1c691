"""The course around the library: the ``ttr-edu`` command (:mod:`.cli`), the notebook pipeline that builds the
student notebooks from the solutions (:mod:`.notebooks`), the student's copy of them as JupyterLab shows it
(:mod:`.student_copy`), the book build (:mod:`.book`) and the claims that bind each chapter's prose to its output
(:mod:`.claims`). A wheel carries the course itself in ``content/`` (see ``setup.py``)."""
