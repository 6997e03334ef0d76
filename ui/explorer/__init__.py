"""The Score | TPF tab: sweeps of (τ_mask, τ_edit) on a model, the Pareto chart, a point loads the playground."""
