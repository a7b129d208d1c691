"""nbgrader configuration that installing ttr-edu puts into the environment's ``etc/jupyter/`` folder, one of the
folders where nbgrader looks for ``nbgrader_config.py`` (the course folder's own is read after it and wins).

It makes ``nbgrader autograde`` grade ttr-edu's notebooks with the grading engine, so an instructor configures
nothing; any other notebook is graded by nbgrader as usual. To turn the engine off, the course's
``nbgrader_config.py`` says ``c.GradeWithEngine.enabled = False`` (see grading.md).
"""

c = get_config()  # noqa: F821 (nbgrader defines get_config for its configuration files)

try:
    from ttr_edu.checks.grading.nbgrader import use_engine
except ImportError:  # ttr-edu is gone from this environment, or imports no longer: nbgrader as usual
    pass
else:
    use_engine(c)
