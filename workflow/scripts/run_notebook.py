"""Execute a jupytext percent-format notebook with papermill, in one process.

    python workflow/scripts/run_notebook.py notebooks/study_x.py results/notebooks/study_x.ipynb \\
        -p results_dir results -p tables_dir results/tables/study_x ...

The .py is read with jupytext and handed to papermill as a notebook object: a separate
`jupytext` process per notebook (and an unexecuted .ipynb on disk) cost ~2 s of start-up each.
Parameters are strings, as `papermill -p` passes them.
"""

from __future__ import annotations

import argparse
import sys

import jupytext
import papermill


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="jupytext percent .py notebook")
    ap.add_argument("output", help="executed .ipynb to write")
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    ap.add_argument("--kernel", default="python3")
    args = ap.parse_args(argv)
    notebook = jupytext.read(args.source)
    papermill.execute_notebook(
        notebook,
        args.output,
        parameters=dict(args.p),
        kernel_name=args.kernel,
        progress_bar=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
