"""How the SDK finds Kibotos: the same file and variables as the CLI.

The client configuration is the file `kibotos dev` writes ($KIBOTOS_CONFIG,
else $KIBOTOS_HOME/config.env, else ~/.kibotos/config.env), with the same
variables in the environment winning over it (internal/clientconfig in the
Go tree is the reference). The file is KEY=VALUE lines, blank lines and #
comments, values optionally in single or double quotes; a missing file is
empty.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

ENV_WORKSPACE_ENDPOINT = "KIBOTOS_WORKSPACE_ENDPOINT"
ENV_TOKEN = "KIBOTOS_TOKEN"
ENV_HOME = "KIBOTOS_HOME"
ENV_CONFIG = "KIBOTOS_CONFIG"


@dataclass(frozen=True)
class Config:
    """Where the Workspace endpoint is and the API key it takes."""

    endpoint: str
    api_key: str


def default_path() -> Path:
    """$KIBOTOS_CONFIG, else $KIBOTOS_HOME/config.env, else ~/.kibotos/config.env."""
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    home = os.environ.get(ENV_HOME) or str(Path.home() / ".kibotos")
    return Path(home) / "config.env"


def read_env_file(path: Path) -> Dict[str, str]:
    """Parses a KEY=VALUE file as clientconfig.ReadEnvFile does."""
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("export "):
                line = line[len("export ") :]
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}:{n}: want KEY=VALUE")
            out[key.strip()] = _unquote(value.strip())
    return out


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1].replace("'\\''", "'")
    return v


def load(
    endpoint: Optional[str] = None,
    api_key: Optional[str] = None,
    config_file: Optional[os.PathLike] = None,
) -> Config:
    """Arguments win, then the environment, then the configuration file.

    config_file names another file of the same format, e.g. the
    endpoints.env in ctrl's state directory.
    """
    path = Path(config_file) if config_file is not None else default_path()
    try:
        values = read_env_file(path)
    except FileNotFoundError:
        if config_file is not None:
            raise
        values = {}
    for key in (ENV_WORKSPACE_ENDPOINT, ENV_TOKEN):
        if key in os.environ:
            values[key] = os.environ[key]
    endpoint = endpoint if endpoint is not None else values.get(ENV_WORKSPACE_ENDPOINT, "")
    api_key = api_key if api_key is not None else values.get(ENV_TOKEN, "")
    if not endpoint:
        raise ValueError(
            f"no workspace endpoint: run `kibotos dev`, or pass endpoint= and api_key=, "
            f"or set {ENV_WORKSPACE_ENDPOINT} and {ENV_TOKEN} (read {path})"
        )
    return Config(endpoint=endpoint, api_key=api_key)
