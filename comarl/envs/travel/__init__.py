"""TravelPlanner: collaborative travel planning scored by the benchmark's own constraint checks."""
