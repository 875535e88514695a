"""Tool use (function calling) environments: BFCL v4 parallel and flattened multi-turn."""
