"""Shared pieces of the configuration schema: the error type and the strict base model."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

HEADER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
HEADER_VALUE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII, no spaces, no CR/LF


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or fails validation."""


class Strict(BaseModel):
    """A frozen pydantic model that rejects unknown keys (a misspelt field is an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
