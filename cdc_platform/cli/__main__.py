"""``python -m cdc_platform.cli``: the console script."""

from cdc_platform.cli import console

console()
