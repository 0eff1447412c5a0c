"""opformer.tasks: one module per problem and a registry (see :mod:`opformer.tasks.base` and ``docs/tasks.md``).

Built in: ``burgers`` (paper §5.1), ``darcy`` (§5.2), ``darcy-inverse`` (§5.3).  A task of the user's own is
registered by importing its module, or named in ``OPFORMER_TASKS`` or an ``opformer.tasks`` entry point.
``opformer.load`` returns the :class:`~opformer.tasks.artifact.Predictor` of a trained model.
"""

from .base import Bundle, NoOptions, Operator, Task, cache_dir, ensure_files, get_task, grid_coords, \
    import_task_module, list_tasks, register_task, unregister_task

__all__ = ["Task", "Bundle", "Operator", "NoOptions", "register_task", "unregister_task", "get_task", "list_tasks", "grid_coords",
           "cache_dir", "ensure_files", "import_task_module"]
