"""The control plane's messages: what the source and the coordinator say to each other,
in one floor that both import and neither owns (as Flink's task side and its coordinator
share only the barrier, the checkpoint exception and its reasons).

- :mod:`.offsets`: the source offset, the planner's whole state (the barrier log).
- :mod:`.record`: the control record, everything the coordinator tells the source
  (requests, cancels, completions, heartbeat, schedule, a typed fatal error).
- :mod:`.triggers`: a trigger request (a savepoint the source is to start).
- :mod:`.schedule`: the next periodic checkpoint the coordinator publishes.
- :mod:`.columns`: the marker columns a batch carries to the keyed operator and sinks.
- :mod:`.model`, :mod:`.stats`: a checkpoint's kind, status and statistics record (the
  ``_checkpoints`` row).
"""
