"""toolbridge test suite."""
