"""Extract the openAPIV3Schema of selected kinds from CustomResourceDefinition YAML files.

Writes ``<group>/<kind>_<version>.json`` (descriptions removed, keys sorted) next to this file;
tests/deploy/test_kustomize.py validates the rendered custom resources against them.

    python tests/data/k8s-crd-schemas/extract.py CRD.yaml [CRD.yaml ...] --kinds group/Kind/version ...

Raises SystemExit when a requested group/Kind/version is in none of the files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


def strip_descriptions(schema: Any) -> Any:
    """A JSON schema without ``description`` annotations (property *names* are kept)."""
    if isinstance(schema, list):
        return [strip_descriptions(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            out[key] = {name: strip_descriptions(sub) for name, sub in value.items()}
        else:
            out[key] = strip_descriptions(value)
    return out


def main() -> None:
    """Write one schema file per requested ``group/Kind/version``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("crds", nargs="+", type=Path)
    ap.add_argument(
        "--kinds",
        nargs="+",
        required=True,
        help="group/Kind/version, e.g. networking.istio.io/EnvoyFilter/v1alpha3",
    )
    args = ap.parse_args()
    wanted = set(args.kinds)
    for path in args.crds:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                key = f"{spec['group']}/{spec['names']['kind']}/{version['name']}"
                if key not in wanted:
                    continue
                schema = strip_descriptions(version["schema"]["openAPIV3Schema"])
                out = HERE / spec["group"] / f"{spec['names']['kind']}_{version['name']}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(schema, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
                wanted.discard(key)
                print(f"{out.relative_to(HERE)}  <- {path.name}")
    if wanted:
        raise SystemExit(f"not found: {sorted(wanted)}")


if __name__ == "__main__":
    main()
