"""Resolver adapters: ``verify.py`` proves whether constraints can hold and says why not when
they cannot, through ``uv.py`` or ``pip_tools.py``, ``command.py`` replaying a step's install,
``index.py`` the package index client and ``explain.py`` why a resolution fails. Re-exports
only.
"""

from pinguard.repair.resolve.command import (
    InstallReplay,
    parse_command_line,
    parse_install_commands,
)
from pinguard.repair.resolve.explain import Explanation, Link
from pinguard.repair.resolve.index import SimpleIndex, TargetEnvironment
from pinguard.repair.resolve.uv import CompileResult, IndexOptions
from pinguard.repair.resolve.verify import (
    RESOLVERS,
    Alternative,
    Blocker,
    OverrideOption,
    Verification,
    compile_requirements,
    constraint_map,
    verify_constraints,
)

__all__ = [
    "RESOLVERS",
    "Alternative",
    "Blocker",
    "CompileResult",
    "Explanation",
    "IndexOptions",
    "InstallReplay",
    "Link",
    "OverrideOption",
    "SimpleIndex",
    "TargetEnvironment",
    "Verification",
    "compile_requirements",
    "constraint_map",
    "parse_command_line",
    "parse_install_commands",
    "verify_constraints",
]
