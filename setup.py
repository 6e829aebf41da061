"""Build of the one C extension, ``extproc.core.text._runscan`` (the one-pass run counter of
``extproc.core.text.runs``); everything else is declared in pyproject.toml.

The extension is optional: where no C compiler or Python headers are found the build goes on and
``extproc.core.text.runs`` counts with numpy instead (same counts, ~10x slower on a 32 KB prompt and
20-25x on a 512 KB one: docs/performance.md §Run counter; the router logs which path it runs at
start-up and exports it as ``tbr_build_info{runscan}``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "extproc.core.text._runscan",
            sources=["extproc/core/text/_runscan.c"],
            extra_compile_args=[
                "-O3",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror=implicit-function-declaration",
            ],
            optional=True,
        )
    ]
)
