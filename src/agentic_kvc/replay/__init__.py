"""The trace replayer: closed-loop sessions and open-loop timestamps, with SSE timing."""
