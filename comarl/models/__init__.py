"""The models: agents, LoRA views, frozen references, the tiny test model, prompt rendering."""
