"""attnbench's built-in implementations: each module registers through the same entry-point
group as any third-party plugin (see pyproject.toml)."""
