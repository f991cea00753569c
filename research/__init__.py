"""Research code on top of vit_jax: studies and what generates docs/; not installed."""
