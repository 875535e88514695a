"""The records that flow between components and the config machinery every layer reads."""
