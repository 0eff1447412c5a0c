"""opformer.tasks: one module per problem and a registry (see :mod:`opformer.tasks.base` and ``docs/tasks.md``).

Built in: ``burgers`` (paper §5.1), ``darcy`` (§5.2), ``darcy-inverse`` (§5.3).  ``opformer.load`` returns the
:class:`~opformer.tasks.artifact.Predictor` of a trained model.
"""

from .base import Bundle, NoOptions, Operator, Task, cache_dir, ensure_files, get_task, grid_coords, list_tasks, \
    register_task, unregister_task

__all__ = ["Task", "Bundle", "Operator", "NoOptions", "register_task", "unregister_task", "get_task", "list_tasks", "grid_coords",
           "cache_dir", "ensure_files"]
