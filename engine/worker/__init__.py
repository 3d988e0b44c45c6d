"""The worker: pull tasks, dispatch them through the task-handler table, batch, recover from OOM."""
