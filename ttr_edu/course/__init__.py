"""The course around the library: the ``ttr-edu`` command (:mod:`.cli`), the notebook pipeline that builds the
student notebooks from the solutions (:mod:`.notebooks`), the book build (:mod:`.book`) and the claims that bind
each chapter's prose to its output (:mod:`.claims`)."""
