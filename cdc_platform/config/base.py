"""What every configuration model shares: unknown keys refused, values frozen, and secrets
read from the environment only when a connection is made."""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, SecretStr

from cdc_platform.errors import ConfigError

__all__ = ["ConfigModel", "env_var_label", "read_secret"]


class ConfigModel(BaseModel):
    """A configuration section: a typo is an error naming the key, and nothing changes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_CONVENTIONAL_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*_?$")


def env_var_label(env_var: str) -> str:
    """How a message names the variable a ``password_env`` names: by its name when it looks
    like a variable name (upper case, digits, ``_``), else without it: a mixed-case value is
    more likely the password itself, put where its variable's name belongs."""
    if _CONVENTIONAL_ENV_NAME.match(env_var):
        return f"environment variable {env_var}"
    return (
        "the environment variable named there (its value is not shown: it does not look like a "
        "variable name and may be the password itself; password_env takes the NAME of a "
        "variable such as CDC_SHOP_PASSWORD)"
    )


def read_secret(env_var: str) -> SecretStr:
    """Read a secret from the environment, or fail naming the variable (never the value)."""
    value = os.environ.get(env_var)
    if value is None:
        raise ConfigError(f"{env_var_label(env_var)} is not set")
    return SecretStr(value)
