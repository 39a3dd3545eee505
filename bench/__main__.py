"""``python -m bench [NAME ...]``: run the named benchmarks, or all of them."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from collections.abc import Callable

import bench


def available() -> dict[str, str]:
    """Benchmark name -> module name, for every module of the package (mains checked later)."""
    modules = {}
    for module in pkgutil.iter_modules(bench.__path__):
        if module.name.startswith("_"):
            continue
        modules[module.name.removesuffix("_bench")] = f"bench.{module.name}"
    return dict(sorted(modules.items()))


def load_main(module_name: str) -> Callable[[], object] | None:
    main = getattr(importlib.import_module(module_name), "main", None)
    return main if callable(main) else None


def run(names: list[str]) -> int:
    modules = available()
    unknown = [name for name in names if name not in modules]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(modules)}",
            file=sys.stderr,
        )
        return 2
    failed = []
    for name in names or list(modules):
        main = load_main(modules[name])
        if main is None:
            if names:
                print(f"{modules[name]} defines no main()", file=sys.stderr)
                failed.append(name)
            continue
        print(f"=== {name} ({modules[name]}) ===", flush=True)
        try:
            main()
        except Exception:  # noqa: BLE001 - one failing benchmark must not stop the others
            traceback.print_exc()
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
