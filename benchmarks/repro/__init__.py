"""The reproduction grid of ``benchmarks/reproduce.py`` (issue 31): tasks, conditions, runs, scores, results, render.

Everything here drives comarl through its public surface (``comarl.Trainer``, ``TrainConfig``, ``AgentConfig``,
``build_agents``, the environment registry, ``comarl.runs.heldout``) and never edits the library.
"""
