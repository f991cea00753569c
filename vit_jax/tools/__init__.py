"""The user's tools on top of the core: predict, analyze, features, flops, export_timm."""
