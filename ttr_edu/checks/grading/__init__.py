"""The grading engine: a student's notebook graded where the student's code cannot reach the verdict (``grading.md``).

* :mod:`ttr_edu.checks.grading.notebook` reads a submission against its release: the setup cells (the release's), the
  student's answer cells (by nbgrader ``grade_id``), the graded cells and the checks they call;
* :mod:`ttr_edu.checks.grading.engine` (the grader's process) builds each exercise's cases and references, starts the
  answers' process in a sandbox (:mod:`ttr_edu.checks.grading.sandbox`), reads back plain tensors and judges them
  with the same code as the check in the student's kernel (:mod:`ttr_edu.checks._rules`);
* :mod:`ttr_edu.checks.grading._child` runs inside the sandbox: the setup cells once, then one forked process per
  graded cell that locks itself down (:func:`ttr_edu.checks._guard.lock_down`) before the student's code runs;
* :mod:`ttr_edu.checks.grading.nbgrader` puts the engine into ``nbgrader autograde`` for the course's notebooks (the
  graded cells' outputs are written from the engine's verdicts, never by a kernel running the student's code), with
  no configuration: installing the package puts an ``nbgrader_config.py`` that switches it on into the environment's
  ``etc/jupyter/``; ``ttr-edu check`` prints the same verdicts for a student.
"""
