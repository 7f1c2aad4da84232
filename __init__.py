"""dpstream."""
