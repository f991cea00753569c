"""The small-data study: a grid runner, its results file and report (see __main__.py)."""
