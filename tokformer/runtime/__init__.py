"""What a task sees of a run: the :class:`~tokformer.runtime.task.Task` protocol, the task
registry, the run configs and the process group.

It sits right above the core and below everything that drives tasks (the store, the engine),
so each of those can name tasks and configs without importing one another. Tasks import these
names through :mod:`tokformer.engine`, their one public surface.
"""
