"""Minecraft building tasks for teams: StrBuild and HouseBuild (docs/minecraft.md).

Importing the package registers the environments ``str_build`` and ``house_build``.
"""
from .env import MinecraftEnv, build_house, build_str

__all__ = ["MinecraftEnv", "build_house", "build_str"]
