"""Configuration of the ``etl`` command: flags > environment > project file > defaults.

The project file is the first of these found in the working directory or one of its
parents (or the file ``$ETL_CONFIG`` names):

- ``etl.toml``, its keys at the top level;
- ``pyproject.toml`` with a ``[tool.etl]`` table.

Keys (see :data:`SETTINGS`): ``warehouse``, ``catalog``, ``master``, ``consistency``,
``format``, ``engine``. A relative ``warehouse`` is relative to the file's directory.
``etl config`` prints the effective values and where each comes from, the catalog
password masked (:func:`catalog.mask_url`).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from etl.errors import UsageError

CONFIG_ENV = "ETL_CONFIG"
PROJECT_FILE = "etl.toml"


@dataclass(frozen=True)
class Setting:
    key: str
    """The key in the project file."""
    param: str
    """The name of the commands' parameter it sets."""
    env: str | None
    default: str | None
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("warehouse", "warehouse", "ETL_WAREHOUSE", "warehouse", "tables and default catalog"),
    Setting("catalog", "catalog_url", "ETL_CATALOG_URL", None, "catalog URL"),
    Setting("master", "master", "ETL_SPARK_MASTER", "local[*]", "Spark master"),
    Setting("consistency", "consistency", None, "repeatable-read", "level of sql/snapshot"),
    Setting("format", "format", None, "table", "output format"),
    Setting("engine", "engine", "ETL_SQL_ENGINE", "duckdb", "engine of etl sql"),
)
BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class ProjectConfig:
    path: Path | None
    values: Mapping[str, Any]


def _usage_error(message: str) -> UsageError:
    # Imported here: etl.errors imports the catalog (SQLAlchemy), which `etl --version`
    # and `etl --help`, reading this file, do not need.
    from etl.errors import UsageError

    return UsageError(message)


def find_project_file(start: Path | None = None) -> Path | None:
    """``$ETL_CONFIG``, or the nearest ``etl.toml`` / ``pyproject.toml`` with ``[tool.etl]``."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise _usage_error(f"${CONFIG_ENV} names {explicit!r}, which is not a file")
        return path
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / PROJECT_FILE
        if candidate.is_file():
            return candidate
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and "etl" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise _usage_error(f"project file {str(path)!r} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise _usage_error(f"cannot read project file {str(path)!r}: {exc.strerror}") from None


def load_project_config(start: Path | None = None) -> ProjectConfig:
    """The settings of the project file (empty when there is none); unknown keys are errors."""
    path = find_project_file(start)
    if path is None:
        return ProjectConfig(None, {})
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("etl", {})
    unknown = sorted(set(data) - set(BY_KEY))
    if unknown:
        raise _usage_error(
            f"project file {str(path)!r}: unknown setting(s) {', '.join(unknown)}; "
            f"known: {', '.join(BY_KEY)}"
        )
    values: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(value, str):
            raise _usage_error(f"project file {str(path)!r}: {key} must be a string, got {value!r}")
        values[key] = value
    if "warehouse" in values and "://" not in values["warehouse"]:
        values["warehouse"] = str((path.parent / values["warehouse"]).expanduser())
    return ProjectConfig(path, values)


def default_map(command: Any, config: ProjectConfig) -> dict[str, Any]:
    """Click's ``default_map`` for ``command`` (a group) from the project file: every
    command's parameter named like a setting gets the file's value, where it accepts it."""
    by_param = {BY_KEY[k].param: v for k, v in config.values.items()}
    if not by_param:
        return {}
    return _defaults_of(command, by_param)


def _defaults_of(command: Any, by_param: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for param in getattr(command, "params", []):
        if param.name in by_param and _accepts(param, by_param[param.name]):
            result[param.name] = by_param[param.name]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        nested = _defaults_of(sub, by_param)
        if nested:
            result[name] = nested
    return result


def _accepts(param: Any, value: Any) -> bool:
    """Whether a project file's ``value`` is one of ``param``'s choices (any value, if it has none)."""
    choices = getattr(getattr(param, "type", None), "choices", None)
    if choices is None:
        return True
    names = {getattr(c, "value", c) for c in choices}
    return value in names


def scrub(text: str, url: str | None) -> str:
    """``text`` with no trace of ``url``'s password: the URL itself, the password raw and
    percent-decoded, and each of its pieces of 3+ characters."""
    from urllib.parse import unquote

    from catalog import mask_url, url_password

    password = None if url is None else url_password(url)
    if url is None or password is None:
        return text
    text = text.replace(url, mask_url(url))
    candidates = {password, unquote(password)}
    for variant in list(candidates):
        candidates.update(p for p in re.split(r"[@:/%?#&=]", variant) if len(p) >= 3)
    for secret in sorted(candidates, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "***")
    return text


__all__ = [
    "BY_KEY",
    "CONFIG_ENV",
    "PROJECT_FILE",
    "SETTINGS",
    "ProjectConfig",
    "Setting",
    "default_map",
    "find_project_file",
    "load_project_config",
    "scrub",
]
