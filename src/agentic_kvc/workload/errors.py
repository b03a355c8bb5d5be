"""The one error every workload reader raises: it names the file, the line and the field."""

from __future__ import annotations

from pathlib import Path


class WorkloadFormatError(ValueError):
    """A trace or workload file that cannot be read as the format it claims to be.

    The message reads `FILE:LINE: field 'NAME': what is wrong`, so a bad row can be found
    with an editor's goto-line; `line` is 1-based and counts the header of CSV files.
    """

    def __init__(
        self, path: str | Path, message: str, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path if line is None else f"{self.path}:{line}"
        what = message if field is None else f"field {field!r}: {message}"
        super().__init__(f"{where}: {what}")
